"""The console's pages as HTML, from the objects as the API server returns them: pure functions, every value
escaped. Cells that change carry ``data-live="<key>"``; the live feed sends ``{key: text}`` for them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote

Obj = Mapping[str, Any]
NAV = (("pools", "Pools"), ("jobs", "Jobs"), ("crons", "CronScrapeJobs"))


def e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _meta(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def key(kind: str, obj: Obj, field: str) -> str:
    namespace, name = _meta(obj)
    return f"{kind}/{namespace}/{name}/{field}"


def job_live(job: Obj) -> dict[str, str]:
    """What a job's page and row show that changes while it runs."""
    status = _status(job)
    counts = status.get("counts") or {}
    fields = {
        "phase": status.get("phase") or "Pending",
        "progress": str(status.get("progress") or 0),
        "total": str(counts.get("total") or 0),
        "succeeded": str(counts.get("succeeded") or 0),
        "pending": str(counts.get("pending") or 0),
        "inFlight": str(counts.get("inFlight") or 0),
        "retrying": str(counts.get("retrying") or 0),
        "deadLettered": str(counts.get("deadLettered") or 0),
        "eta": status.get("eta") or "—",
        "message": status.get("message") or "",
    }
    return {key("job", job, f): v for f, v in fields.items()}


def throttled_domains(jobs: Iterable[Obj]) -> list[str]:
    return sorted({str(d.get("domain")) for j in jobs for d in (_status(j).get("throttledDomains") or [])})


def pool_jobs(pool: Obj, jobs: Iterable[Obj]) -> list[Obj]:
    namespace, name = _meta(pool)
    return [
        j for j in jobs
        if str((j.get("spec") or {}).get("pool") or "") == name
        and str((j.get("spec") or {}).get("poolNamespace") or _meta(j)[0]) == namespace
    ]  # fmt: skip


def pool_live(pool: Obj, jobs: Iterable[Obj]) -> dict[str, str]:
    status = _status(pool)
    queue = status.get("queue") or {}
    backlog = int(queue.get("ready") or 0) + int(queue.get("delayed") or 0) + int(queue.get("held") or 0)
    fields = {
        "replicas": f"{status.get('readyReplicas') or 0}/{status.get('replicas') or 0} (wants "
        f"{status.get('desiredReplicas') or 0})",
        "backlog": str(backlog),
        "inFlight": str(queue.get("inFlight") or 0),
        "throughput": f"{float(queue.get('throughputPerSecond') or 0):.1f}/s",
        "failureRate": f"{100 * float(queue.get('failureRate') or 0):.1f} %",
        "throttled": ", ".join(throttled_domains(pool_jobs(pool, jobs))) or "none",
    }
    return {key("pool", pool, f): v for f, v in fields.items()}


def cron_live(cron: Obj) -> dict[str, str]:
    status = _status(cron)
    fields = {
        "next": status.get("nextScheduleTime") or "—",
        "last": status.get("lastScheduleTime") or "—",
        "active": ", ".join(str(a.get("name")) for a in status.get("active") or []) or "none",
    }
    return {key("cron", cron, f): v for f, v in fields.items()}


@dataclass(frozen=True)
class Viewer:
    """Who looks, as the page tells them (never their token), and the CSRF token of their forms."""

    username: str
    csrf: str
    via_cookie: bool


def layout(title: str, current: str, viewer: Viewer | None, body: str, live: bool = False) -> str:
    nav = "".join(
        f'<a href="/console/{path}"{" aria-current=page" if path == current else ""}>{label}</a>' for path, label in NAV
    )
    who = ""
    if viewer is not None:
        logout = (
            f'<form method="post" action="/console/logout"><input type="hidden" name="csrf" value="{e(viewer.csrf)}">'
            '<button type="submit">Log out</button></form>'
            if viewer.via_cookie
            else ""
        )
        who = f'<div class="who">Signed in as <strong>{e(viewer.username)}</strong>{logout}</div>'
    state = '<p id="live-state" role="status" aria-live="polite" class="muted">connecting…</p>' if live else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · Trawl</title>"
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<script src="/console/static/console.js" defer></script></head><body'
        f"{' data-live-feed=/console/events' if live else ''}>"
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header><span class="brand">Trawl</span><nav aria-label="Main">{nav}</nav>{who}</header>'
        f'<main id="main"><h1>{e(title)}</h1>{state}{body}</main></body></html>'
    )


def cell(live: Mapping[str, str], k: str) -> str:
    return f'<td data-live="{e(k)}">{e(live.get(k, ""))}</td>'


def table(caption: str, headers: Sequence[str], rows: Sequence[str], empty: str) -> str:
    if not rows:
        return f'<p class="empty">{e(empty)}</p>'
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in headers)
    return (
        f'<div class="scroll"><table><caption>{e(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def job_href(job: Obj) -> str:
    namespace, name = _meta(job)
    return f"/console/jobs/{quote(namespace, safe='')}/{quote(name, safe='')}"


def progress_bar(job: Obj, live: Mapping[str, str]) -> str:
    k = key("job", job, "progress")
    return (
        f'<progress max="100" value="{e(live.get(k, "0"))}" data-live="{e(k)}" '
        f'aria-label="Progress of {e(_meta(job)[1])}"></progress> <span data-live="{e(k)}">{e(live.get(k))}</span>%'
    )


def jobs_page(viewer: Viewer, jobs: Sequence[Obj]) -> str:
    rows = []
    for job in jobs:
        live = job_live(job)
        namespace, name = _meta(job)
        rows.append(
            f'<tr><td>{e(namespace)}</td><td><a href="{job_href(job)}">{e(name)}</a></td>'
            f"{cell(live, key('job', job, 'phase'))}<td>{progress_bar(job, live)}</td>"
            f"{cell(live, key('job', job, 'succeeded'))}{cell(live, key('job', job, 'total'))}"
            f"{cell(live, key('job', job, 'deadLettered'))}</tr>"
        )
    note = '<p class="muted">Only the namespaces your Kubernetes RBAC lets you list are shown.</p>'
    body = table(
        "ScrapeJobs", ["Namespace", "Job", "Phase", "Progress", "Succeeded", "Total", "Dead letters"], rows,
        "No ScrapeJobs you may see.",
    )  # fmt: skip
    # always said, never only when something is hidden: that would tell a viewer other namespaces have jobs
    return layout("Jobs", "jobs", viewer, body + note, live=True)


def pools_page(viewer: Viewer, pools: Sequence[Obj], jobs: Sequence[Obj]) -> str:
    rows = []
    for pool in pools:
        live = pool_live(pool, jobs)
        namespace, name = _meta(pool)
        cells = "".join(
            cell(live, key("pool", pool, f))
            for f in ("replicas", "backlog", "inFlight", "throughput", "failureRate", "throttled")
        )
        rows.append(f"<tr><td>{e(namespace)}</td><td>{e(name)}</td>{cells}</tr>")
    headers = ["Namespace", "Pool", "Replicas", "Backlog", "In flight", "Throughput", "Failure rate", "Throttled"]
    return layout("Pools", "pools", viewer, table("ScrapePools", headers, rows, "No ScrapePools you may see."), True)


def crons_page(viewer: Viewer, crons: Sequence[Obj]) -> str:
    rows = []
    for cron in crons:
        live = cron_live(cron)
        namespace, name = _meta(cron)
        schedule = (cron.get("spec") or {}).get("schedule")
        cells = "".join(cell(live, key("cron", cron, f)) for f in ("next", "last", "active"))
        rows.append(f"<tr><td>{e(namespace)}</td><td>{e(name)}</td><td><code>{e(schedule)}</code></td>{cells}</tr>")
    headers = ["Namespace", "CronScrapeJob", "Schedule", "Next run", "Last run", "Active jobs"]
    body = table("CronScrapeJobs", headers, rows, "No CronScrapeJobs you may see.")
    return layout("CronScrapeJobs", "crons", viewer, body, True)


@dataclass(frozen=True)
class JobExtras:
    """What the viewer may see of a job beyond the object, each None when RBAC says no."""

    dead_letters: list[dict[str, Any]] | None
    preview: list[dict[str, Any]] | None
    preview_error: str | None
    events: list[dict[str, Any]] | None
    may_retry: bool


def _conditions(job: Obj) -> str:
    rows = [
        f"<tr><td>{e(c.get('type'))}</td><td>{e(c.get('status'))}</td><td>{e(c.get('reason'))}</td>"
        f"<td>{e(c.get('message'))}</td><td>{e(c.get('lastTransitionTime'))}</td></tr>"
        for c in _status(job).get("conditions") or []
    ]
    return table("Conditions", ["Type", "Status", "Reason", "Message", "Since"], rows, "No conditions yet.")


def _events(events: list[dict[str, Any]] | None) -> str:
    if events is None:
        return '<p class="muted">You may not list Events in this namespace.</p>'
    rows = [
        f"<tr><td>{e(ev.get('type'))}</td><td>{e(ev.get('reason'))}</td><td>{e(ev.get('message'))}</td>"
        f"<td>{e(ev.get('count') or 1)}</td><td>{e(ev.get('lastTimestamp') or ev.get('eventTime'))}</td></tr>"
        for ev in events
    ]
    return table("Events", ["Type", "Reason", "Message", "Count", "Last seen"], rows, "No Events.")


def _dead_letters(job: Obj, viewer: Viewer, extras: JobExtras) -> str:
    if extras.dead_letters is None:
        return '<p class="muted">You may not read this job\'s dead letters (get scrapejobs/deadletters).</p>'
    rows = [
        f"<tr><td class=url>{e(d.get('url'))}</td><td>{e(d.get('errorClass'))}</td><td>{e(d.get('lastError'))}</td>"
        f"<td>{e(d.get('attempts'))}</td><td>{e(d.get('time'))}</td></tr>"
        for d in extras.dead_letters
    ]
    button = ""
    if extras.may_retry:
        button = (
            f'<form method="post" action="{job_href(job)}/retry" class="retry">'
            f'<input type="hidden" name="csrf" value="{e(viewer.csrf)}">'
            '<label><input type="checkbox" name="all" value="true"> also permanent failures (4xx, blocked)</label> '
            '<button type="submit" id="retry">Retry dead letters</button></form>'
        )
    return button + table("Dead letters", ["URL", "Class", "Last error", "Attempts", "When"], rows, "None.")


def _preview(job: Obj, extras: JobExtras) -> str:
    if extras.preview_error is not None:
        return f'<p class="muted">{e(extras.preview_error)}</p>'
    if extras.preview is None:
        return '<p class="muted">You may not read this job\'s results (get scrapejobs/results).</p>'
    lines = "\n".join(json.dumps(r, ensure_ascii=False, sort_keys=True) for r in extras.preview)
    return (
        f'<p><a href="{job_href(job)}/results.jsonl" download>Download all results (JSON Lines)</a></p>'
        f'<pre id="preview" tabindex="0" aria-label="The first {len(extras.preview)} records">{e(lines)}</pre>'
    )


def job_page(viewer: Viewer, job: Obj, extras: JobExtras) -> str:
    live = job_live(job)
    k = {f: key("job", job, f) for f in ("phase", "eta", "message")}
    counts = "".join(
        f'<div><dt>{label}</dt><dd data-live="{e(key("job", job, f))}">{e(live[key("job", job, f)])}</dd></div>'
        for f, label in (
            ("total", "Total"), ("succeeded", "Succeeded"), ("pending", "Pending"), ("inFlight", "In flight"),
            ("retrying", "Retrying"), ("deadLettered", "Dead letters"),
        )
    )  # fmt: skip
    body = (
        f'<p>Phase <strong data-live="{e(k["phase"])}">{e(live[k["phase"]])}</strong> · ETA '
        f'<span data-live="{e(k["eta"])}">{e(live[k["eta"]])}</span></p>'
        f"<p>{progress_bar(job, live)}</p>"
        f'<p data-live="{e(k["message"])}" class="muted">{e(live[k["message"]])}</p>'
        f'<dl class="counts">{counts}</dl>'
        f"<h2>Conditions</h2>{_conditions(job)}"
        f"<h2>Dead letters</h2>{_dead_letters(job, viewer, extras)}"
        f"<h2>Results preview</h2>{_preview(job, extras)}"
        f"<h2>Events</h2>{_events(extras.events)}"
    )
    namespace, name = _meta(job)
    return layout(f"Job {namespace}/{name}", "jobs", viewer, body, live=True)


def login_page(message: str | None, csrf_hint: str = "") -> str:
    error = f'<p class="error" role="alert">{e(message)}</p>' if message else ""
    body = (
        f"{error}<form method=post action=/console/login class=login>"
        '<label for="token">Kubernetes bearer token</label>'
        '<textarea id="token" name="token" rows="4" required autocomplete="off" spellcheck="false"></textarea>'
        '<p class="muted">For example <code>kubectl create token &lt;service-account&gt;</code> or your OIDC '
        "ID token. It is kept in an HttpOnly cookie of this site only, and checked with the API server.</p>"
        '<button type="submit">Sign in</button></form>'
    )
    return layout("Sign in", "", None, body)


def error_page(viewer: Viewer | None, status: int, message: str) -> str:
    return layout(f"{status}", "", viewer, f'<p class="error" role="alert">{e(message)}</p>')
