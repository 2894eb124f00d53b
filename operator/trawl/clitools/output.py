"""Rich renderings of the CLI's data: pure functions from plain dicts/records to renderables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trawl.queue.model import DeadLetterRecord

from .top import History, PoolSample, sparkline


def job_pool_label(job: dict[str, Any]) -> str:
    """The job's pool as a table shows it: its name, or namespace/name for a pool of another namespace."""
    pool = str((job.get("spec") or {}).get("pool", ""))
    pool_ns = (job.get("spec") or {}).get("poolNamespace")
    return f"{pool_ns}/{pool}" if pool_ns and pool_ns != job["metadata"].get("namespace") else pool


PHASE_STYLE = {
    "Succeeded": "green",
    "Failed": "red",
    "Running": "cyan",
    "Queued": "blue",
    "Suspended": "yellow",
    "Pending": "dim",
}


def _parse(ts: Any) -> datetime | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None


def age(ts: Any, now: datetime | None = None) -> str:
    """kubectl-style age: 45s, 12m, 3h, 5d."""
    when = _parse(ts)
    if when is None:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - when).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def phase_text(phase: str | None) -> Text:
    value = phase or "Pending"
    return Text(value, style=PHASE_STYLE.get(value, ""))


def jobs_table(jobs: Sequence[dict[str, Any]], *, show_namespace: bool = False, now: datetime | None = None) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    if show_namespace:
        table.add_column("NAMESPACE")
    for col in ("NAME", "POOL", "PHASE"):
        table.add_column(col)
    for col in ("PROGRESS", "SUCCEEDED", "TOTAL", "DEAD"):
        table.add_column(col, justify="right")
    table.add_column("AGE", justify="right")
    table.add_column("MESSAGE", overflow="ellipsis", no_wrap=True, max_width=60)
    for job in jobs:
        status = job.get("status") or {}
        counts = status.get("counts") or {}
        row: list[RenderableType] = []
        if show_namespace:
            row.append(job["metadata"].get("namespace", ""))
        row += [
            job["metadata"]["name"],
            job_pool_label(job),
            phase_text(status.get("phase")),
            f"{status.get('progress', 0)}%",
            str(counts.get("succeeded", 0)),
            str(counts.get("total", 0)),
            str(counts.get("deadLettered", 0)),
            age(job["metadata"].get("creationTimestamp"), now),
            status.get("message") or "",
        ]
        table.add_row(*_cells(*row))
    return table


def _cells(*values: Any) -> list[RenderableType]:
    """Table cells: strings as plain Text, so brackets in URLs or error messages are never read as markup."""
    return [v if isinstance(v, Text | Table | Panel | Group) else Text(str(v)) for v in values]


def _kv(rows: Sequence[tuple[str, RenderableType]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(*_cells(key, value))
    return table


def job_detail(job: dict[str, Any], now: datetime | None = None) -> RenderableType:
    meta = job["metadata"]
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    counts = status.get("counts") or {}
    parts: list[RenderableType] = []
    summary: list[tuple[str, RenderableType]] = [
        ("Name", f"{meta.get('namespace', '')}/{meta['name']}"),
        ("Pool", job_pool_label(job)),
        ("Phase", phase_text(status.get("phase"))),
        ("Progress", f"{status.get('progress', 0)}%"),
        ("Message", status.get("message") or ""),
        ("Created", f"{meta.get('creationTimestamp', '-')} ({age(meta.get('creationTimestamp'), now)} ago)"),
    ]
    finished = status.get("phase") in ("Succeeded", "Failed")
    for key, label in (("startTime", "Started"), ("completionTime", "Completed"), ("eta", "ETA")):
        if status.get(key) and not (key == "eta" and finished):
            summary.append((label, str(status[key])))
    if spec.get("crawl") is not None:
        crawl = spec["crawl"]
        summary.append(("Crawl", f"max pages {crawl.get('maxPages', 100)}, max depth {crawl.get('maxDepth', 2)}"))
    parts.append(_kv(summary))

    count_table = Table(title="Tasks", title_justify="left", box=None, header_style="bold")
    labels = (
        ("total", "TOTAL"),
        ("pending", "PENDING"),
        ("inFlight", "IN FLIGHT"),
        ("retrying", "RETRYING"),
        ("succeeded", "SUCCEEDED"),
        ("deadLettered", "DEAD"),
    )
    for _key, label in labels:
        count_table.add_column(label, justify="right")
    count_table.add_row(*(str(counts.get(key, 0)) for key, _ in labels))
    parts.append(count_table)

    conditions = status.get("conditions") or []
    if conditions:
        cond_table = Table(title="Conditions", title_justify="left", box=None, header_style="bold")
        for col in ("TYPE", "STATUS", "REASON", "AGE"):
            cond_table.add_column(col)
        cond_table.add_column("MESSAGE", overflow="fold")
        for c in conditions:
            style = "green" if c.get("status") == "True" else "dim"
            cond_table.add_row(
                *_cells(
                    c.get("type", ""),
                    Text(c.get("status", ""), style=style),
                    c.get("reason", ""),
                    age(c.get("lastTransitionTime"), now),
                    c.get("message", ""),
                )
            )
        parts.append(cond_table)

    dead = status.get("deadLetters") or []
    if dead:
        total_dead = int(counts.get("deadLettered", len(dead)))
        title = f"Dead letters (latest {len(dead)} of {total_dead})"
        dl_table = Table(title=title, title_justify="left", box=None, header_style="bold")
        for col in ("URL", "ATTEMPTS", "ERROR", "LAST ERROR"):
            dl_table.add_column(col, overflow="fold")
        for d in dead:
            dl_table.add_row(
                *_cells(d.get("url", ""), d.get("attempts", ""), d.get("errorClass", ""), d.get("lastError", ""))
            )
        parts.append(dl_table)
        parts.append(Text(f"`trawl dlq list {meta['name']}` shows all of them with their attempt history."))

    results = status.get("results")
    if results:
        rows: list[tuple[str, RenderableType]] = [
            ("Sink", str(results.get("sink", ""))),
            ("Location", str(results.get("location", ""))),
            ("Count", str(results.get("count", 0))),
        ]
        if results.get("sink") == "RedisStream":
            rows.append(("Export", f"trawl results {meta['name']} -n {meta.get('namespace', '')} --format csv"))
        parts.append(Panel(_kv(rows), title="Results", title_align="left", expand=False))
    return Group(*parts)


def dead_letters_table(records: Sequence[DeadLetterRecord]) -> Table:
    table = Table(box=None, header_style="bold")
    table.add_column("URL", overflow="fold")
    table.add_column("ATTEMPTS", justify="right")
    table.add_column("ERROR CLASS")
    table.add_column("LAST ERROR", overflow="fold")
    table.add_column("DEAD SINCE")
    for r in records:
        when = datetime.fromtimestamp(r.time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if r.time else "-"
        table.add_row(*_cells(r.url, r.attempts, r.error_class, r.message, when))
    return table


def dead_letter_json(r: DeadLetterRecord) -> dict[str, Any]:
    return {
        "url": r.url,
        "attempts": r.attempts,
        "errorClass": r.error_class,
        "lastError": r.message,
        "time": datetime.fromtimestamp(r.time, UTC).isoformat().replace("+00:00", "Z") if r.time else None,
        "history": r.history,
    }


# Fixed columns of `trawl top` (headers are their widest cells except POOL/NAMESPACE and STATE).
_TOP_FIXED = ("REPLICAS", "BACKLOG", "IN FLIGHT", "TASKS/S", "FAIL %")
_TOP_STATE_MIN = 14  # STATE keeps at least this much (cut with an ellipsis beyond)


def _top_gaps(show_namespace: bool, sparks: bool) -> int:
    """Spaces between the columns (box=None pads one space each side, not at the edges)."""
    count = (1 if show_namespace else 0) + 1 + len(_TOP_FIXED) + (4 if sparks else 0) + 1
    return 2 * (count - 1)


def _spark_width(columns: int, names: int, wanted: int, show_namespace: bool) -> int:
    """Sparkline width that lets the frame fit ``columns``: the fixed columns and a minimum STATE first,
    the four sparklines share what is left (none below 4 cells each: then there are none)."""
    free = columns - names - sum(len(h) for h in _TOP_FIXED) - _TOP_STATE_MIN - _top_gaps(show_namespace, True)
    per = min(wanted, free // 4)
    return per if per >= 4 else 0


def top_frame(
    history: History,
    *,
    show_namespace: bool = False,
    width: int = 20,
    error: str | None = None,
    columns: int | None = None,
) -> Group:
    """One frame of ``trawl top``: a row per pool, current values and sparklines over the window.

    With ``columns`` (the terminal's width) the frame fits it: sparklines narrow, then go, before any
    header wraps; STATE is cut with an ellipsis."""
    latest = history.latest()
    state_width: int | None = None
    pool_width: int | None = None
    ns_width: int | None = None
    if columns is not None:
        pool_width = max([len("POOL"), *(len(s[-1].name) for s in latest)])
        ns_width = max([len("NAMESPACE"), *(len(s[-1].namespace) for s in latest)]) if show_namespace else 0
        width = _spark_width(columns, pool_width + ns_width, width, show_namespace)
        used = (
            pool_width + ns_width + sum(len(h) for h in _TOP_FIXED) + 4 * width + _top_gaps(show_namespace, width > 0)
        )
        deficit = used + _TOP_STATE_MIN - columns
        if deficit > 0:  # long names on a narrow terminal: cut the names (ellipsis), never the numbers
            cut_ns = min(deficit // 2, ns_width - len("NAMESPACE")) if show_namespace else 0
            ns_width -= max(0, cut_ns)
            pool_width = max(len("POOL") + 4, pool_width - (deficit - max(0, cut_ns)))
            used = pool_width + ns_width + sum(len(h) for h in _TOP_FIXED) + _top_gaps(show_namespace, width > 0)
        state_width = max(len("STATE"), columns - used)
    sparks = width > 0
    table = Table(box=None, header_style="bold", pad_edge=False)
    if show_namespace:
        table.add_column("NAMESPACE", no_wrap=True, overflow="ellipsis", width=ns_width)
    table.add_column("POOL", no_wrap=True, overflow="ellipsis", width=pool_width)
    for header in _TOP_FIXED:
        table.add_column(header, justify="right", no_wrap=True)
        if sparks and header != "IN FLIGHT":
            # No header: it would widen the sparkline's column; the window is named below the table.
            table.add_column("", no_wrap=True, overflow="crop")
    if state_width is not None:
        table.add_column("STATE", overflow="ellipsis", no_wrap=True, width=state_width)
    else:
        table.add_column("STATE", overflow="ellipsis", no_wrap=True, max_width=48)
    for series in latest:
        cur = series[-1]
        points = list(series)
        row: list[RenderableType] = [cur.namespace] if show_namespace else []
        fail_style = "red" if cur.failure_rate >= 0.5 else ("yellow" if cur.failure_rate > 0.1 else "")
        cells: list[tuple[RenderableType, RenderableType | None]] = [
            (f"{cur.replicas}/{cur.desired}", Text(sparkline([p.replicas for p in points], width), style="magenta")),
            (str(cur.backlog), Text(sparkline([p.backlog for p in points], width), style="cyan")),
            (str(cur.in_flight), None),
            (f"{cur.throughput:.1f}", Text(sparkline([p.throughput for p in points], width), style="green")),
            (
                Text(f"{100 * cur.failure_rate:.0f}", style=fail_style),
                Text(sparkline([p.failure_rate for p in points], width, top=1.0), style="red"),
            ),
        ]
        row.append(cur.name)
        for value, spark in cells:
            row.append(value)
            if sparks and spark is not None:
                row.append(spark)
        row.append(_state(cur))
        table.add_row(*_cells(*row))
    parts: list[RenderableType] = [table]
    if sparks and latest:
        parts.append(Text(f"sparklines: the last {history.window / 60:g} min", style="dim"))
    tenants = tenant_table([s[-1] for s in latest], show_namespace=show_namespace)
    if tenants is not None:
        parts.append(tenants)
    if not history.pools:
        parts = [Text("no ScrapePools in this namespace", style="dim")]
    if error:
        parts.append(Text(f"last refresh failed: {error}", style="red"))
    return Group(*parts)


def tenant_table(samples: Sequence[PoolSample], *, show_namespace: bool = False) -> Table | None:
    """The tenants of the pools with spec.tenancy, a row each (None when no pool has any): weight, in flight,
    pages and browser seconds today, claims, and the quota holding a tenant back."""
    if not any(s.tenants for s in samples):
        return None
    table = Table(box=None, header_style="bold", pad_edge=False, title="TENANTS", title_justify="left")
    if show_namespace:
        table.add_column("NAMESPACE", no_wrap=True, overflow="ellipsis")
    table.add_column("POOL", no_wrap=True, overflow="ellipsis")
    table.add_column("TENANT", no_wrap=True, overflow="ellipsis")
    for header in ("WEIGHT", "IN FLIGHT", "PAGES TODAY", "BROWSER S TODAY", "CLAIMED"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("THROTTLED", overflow="ellipsis", no_wrap=True, max_width=48)
    for s in samples:
        for t in s.tenants:
            row = [s.namespace] if show_namespace else []
            row += [s.name, t.tenant, str(t.weight), str(t.in_flight), str(t.pages_today)]
            row += [f"{t.browser_seconds_today:,.0f}", str(t.claimed_total)]
            table.add_row(*row, Text(t.throttled, style="yellow") if t.throttled else "")
    return table


def _state(s: PoolSample) -> str:
    notable = [f"{t}: {r}" for t, r in s.conditions.items() if t in ("Stalled", "Degraded", "ScalingLimited")]
    return "; ".join(notable) or s.reason


def _window(history: History) -> str:
    minutes = history.window / 60
    return f"last {minutes:g} min"


def sample_summary(samples: Sequence[PoolSample]) -> str:
    return ", ".join(f"{s.name}: {s.backlog} queued, {s.replicas} replicas" for s in samples)
