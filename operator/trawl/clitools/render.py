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
            (job.get("spec") or {}).get("pool", ""),
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
        ("Pool", spec.get("pool", "")),
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


def top_frame(history: History, *, show_namespace: bool = False, width: int = 20, error: str | None = None) -> Group:
    """One frame of ``trawl top``: a row per pool, current values and sparklines over the window."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    if show_namespace:
        table.add_column("NAMESPACE")
    table.add_column("POOL")
    table.add_column("REPLICAS", justify="right")
    table.add_column(f"replicas ({_window(history)})")
    table.add_column("BACKLOG", justify="right")
    table.add_column("backlog")
    table.add_column("IN FLIGHT", justify="right")
    table.add_column("TASKS/S", justify="right")
    table.add_column("tasks/s")
    table.add_column("FAIL %", justify="right")
    table.add_column("fail %")
    table.add_column("STATE", overflow="ellipsis", no_wrap=True, max_width=48)
    for series in history.latest():
        cur = series[-1]
        points = list(series)
        row: list[RenderableType] = [cur.namespace] if show_namespace else []
        fail_style = "red" if cur.failure_rate >= 0.5 else ("yellow" if cur.failure_rate > 0.1 else "")
        row += [
            cur.name,
            f"{cur.replicas}/{cur.desired}",
            Text(sparkline([p.replicas for p in points], width), style="magenta"),
            str(cur.backlog),
            Text(sparkline([p.backlog for p in points], width), style="cyan"),
            str(cur.in_flight),
            f"{cur.throughput:.1f}",
            Text(sparkline([p.throughput for p in points], width), style="green"),
            Text(f"{100 * cur.failure_rate:.0f}", style=fail_style),
            Text(sparkline([p.failure_rate for p in points], width, top=1.0), style="red"),
            _state(cur),
        ]
        table.add_row(*_cells(*row))
    parts: list[RenderableType] = [table]
    if not history.pools:
        parts = [Text("no ScrapePools in this namespace", style="dim")]
    if error:
        parts.append(Text(f"last refresh failed: {error}", style="red"))
    return Group(*parts)


def _state(s: PoolSample) -> str:
    notable = [f"{t}: {r}" for t, r in s.conditions.items() if t in ("Stalled", "Degraded", "ScalingLimited")]
    return "; ".join(notable) or s.reason


def _window(history: History) -> str:
    minutes = history.window / 60
    return f"last {minutes:g} min"


def sample_summary(samples: Sequence[PoolSample]) -> str:
    return ", ".join(f"{s.name}: {s.backlog} queued, {s.replicas} replicas" for s in samples)
