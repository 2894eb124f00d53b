"""Pure parts of the `trawl` job tools: job objects, CSV/JSONL export, sparklines, renderings, waiting."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from trawl.clitools import output as render
from trawl.clitools.exits import EXIT_OTHER_SINK, EXIT_STALLED, EXIT_TIMEOUT, CliError
from trawl.clitools.results import check_sink, csv_columns, write_csv, write_jsonl
from trawl.clitools.submit import SubmitOptions, build_job, follow, generate_name_for
from trawl.clitools.top import History, sample_pool, sparkline
from trawl.queue.model import DeadLetterRecord


def text(renderable: Any, width: int = 200) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_generate_name_from_the_host() -> None:
    assert generate_name_for("https://www.books.example.com/a") == "books-example-com-"
    assert generate_name_for("http://127.0.0.1:8080/") == "job-127-0-0-1-"
    assert generate_name_for("https://" + "a" * 80 + ".com/").endswith("-")
    assert len(generate_name_for("https://" + "a" * 80 + ".com/")) <= 41


def test_build_job_plain_and_crawl() -> None:
    body = build_job(SubmitOptions(["https://a.example/"], pool="p"))
    assert body["metadata"] == {"generateName": "a-example-"}
    assert body["spec"] == {"pool": "p", "urls": ["https://a.example/"]}
    body = build_job(SubmitOptions(["https://a.example/"], crawl=True, max_pages=50, depth=2, priority=9, name="x"))
    assert body["metadata"] == {"name": "x"}
    assert body["spec"]["crawl"] == {"maxPages": 50, "maxDepth": 2}
    assert body["spec"]["priority"] == 9
    classed = build_job(SubmitOptions(["https://a.example/"], priority_class="bulk"))
    assert classed["spec"]["priorityClassName"] == "bulk" and "priority" not in classed["spec"]
    # --max-pages alone implies a crawl
    assert build_job(SubmitOptions(["https://a.example/"], max_pages=5))["spec"]["crawl"] == {"maxPages": 5}
    assert build_job(SubmitOptions(["https://a.example/"], crawl=True))["spec"]["crawl"] == {}
    body = build_job(SubmitOptions(["https://a.example/"], exclude=("/private/",), max_dead_letters=2))
    assert body["spec"]["crawl"] == {"exclude": ["/private/"]} and body["spec"]["maxDeadLetters"] == 2
    with pytest.raises(CliError, match="regular expression"):
        build_job(SubmitOptions(["https://a.example/"], include=("(",)))


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (SubmitOptions([]), "at least one URL"),
        (SubmitOptions(["ftp://a.example/"]), "invalid job"),
        (SubmitOptions(["https://a.example/"], max_pages=0), "maxPages"),
        (SubmitOptions(["https://a.example/"], pool="Not_A_Label"), "pool"),
    ],
)
def test_build_job_rejects_what_the_operator_would(opts: SubmitOptions, message: str) -> None:
    with pytest.raises(CliError, match=message):
        build_job(opts)


def test_jsonl_and_csv_export() -> None:
    records = [
        {"key": "k1", "job": "u", "url": "https://a/1", "status": 200, "title": "One", "price": "£1", "tags": ["x"]},
        {"key": "k2", "job": "u", "url": "https://a/2", "status": 200, "title": 'Two, "quoted"', "ok": True},
    ]
    out = io.StringIO()
    assert write_jsonl(records, out) == 2
    assert [json.loads(line) for line in out.getvalue().splitlines()] == records
    assert csv_columns(records) == ["url", "status", "title", "ok", "price", "tags"]
    out = io.StringIO()
    assert write_csv(records, out) == 2
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert rows[0] == {"url": "https://a/1", "status": "200", "title": "One", "ok": "", "price": "£1", "tags": '["x"]'}
    assert rows[1]["title"] == 'Two, "quoted"' and rows[1]["ok"] == "true"


def test_results_of_other_sinks_point_at_their_location() -> None:
    redis_job = {"metadata": {"name": "a"}, "spec": {}, "status": {"results": {"sink": "RedisStream"}}}
    check_sink(redis_job)
    check_sink({"metadata": {"name": "a"}, "spec": {}})  # default sink
    files = {
        "metadata": {"name": "f"},
        "spec": {"output": {"sink": "JsonLines"}},
        "status": {"results": {"sink": "JsonLines", "location": "/data/f-1.jsonl"}},
    }
    with pytest.raises(CliError) as info:
        check_sink(files)
    assert info.value.code == EXIT_OTHER_SINK and "/data/f-1.jsonl" in info.value.message
    hook = {"metadata": {"name": "h"}, "spec": {"output": {"sink": "Webhook"}}}
    with pytest.raises(CliError, match="webhook"):
        check_sink(hook)


def test_sparkline() -> None:
    assert sparkline([]) == ""
    assert sparkline([0, 0, 0]) == "▁▁▁"
    assert sparkline([0, 1, 2, 4, 8]) == "▁▃▄▅█"  # any non-zero value shows above the baseline
    assert sparkline(list(range(100)), width=10) == sparkline(list(range(90, 100)), width=10)
    assert sparkline([0.5, 1.0], top=1.0) == "▅█"


def _pool_obj(name: str, backlog: int, replicas: int, tput: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "status": {
            "replicas": replicas,
            "desiredReplicas": replicas + 1,
            "queue": {"ready": backlog, "delayed": 1, "inFlight": 3, "throughputPerSecond": tput, "failureRate": 0.25},
            "scalingReason": "backlog 10 drains in 5s",
            "conditions": [{"type": "Degraded", "status": "True", "reason": "FailureGuard"}],
        },
    }


def test_top_history_and_frame() -> None:
    history = History(window=60)
    for t in range(0, 100, 10):
        history.add([sample_pool(_pool_obj("shop", t, t // 10, float(t)), float(t))], float(t))
    series = history.pools[("ns", "shop")]
    assert [s.time for s in series] == [30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]  # the last minute
    assert series[-1].backlog == 91
    frame = text(render.top_frame(history))
    assert "shop" in frame and "9/10" in frame and "91" in frame and "90.0" in frame and "25" in frame
    assert "Degraded: FailureGuard" in frame
    assert "▁" in frame or "█" in frame
    history.add([], 100.0)  # the pool was deleted
    assert "no ScrapePools" in text(render.top_frame(history))


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("show_namespace", [False, True])
def test_top_fits_the_terminal(columns: int, show_namespace: bool) -> None:
    history = History(window=300)
    for t in range(0, 100, 10):
        pools = [
            sample_pool(_pool_obj("shop", t, t // 10, float(t)), float(t)),
            sample_pool(_pool_obj("a-much-longer-pool-name", t, 3, 1.0), float(t)),
        ]
        history.add(pools, float(t))
    frame = text(render.top_frame(history, show_namespace=show_namespace, columns=columns), width=columns)
    lines = frame.rstrip("\n").splitlines()
    assert all(len(line.rstrip()) <= columns for line in lines), "\n".join(lines)
    header = lines[0].split()
    # Every header on the first line, none wrapped onto a second.
    for word in ("POOL", "REPLICAS", "BACKLOG", "IN", "FLIGHT", "TASKS/S", "FAIL", "STATE"):
        assert word in header, (word, lines[0])
    assert len(lines) in (3, 4), lines  # the header, one line per pool (and the sparklines' window)
    assert "a-much-" in frame and "9/10" in frame  # a long name is cut (ellipsis) before any number
    if columns == 120 and not show_namespace:  # room for sparklines; narrower, they give way first
        assert any(ch in frame for ch in "▁▂▃▄▅▆▇█"), frame


def _job(name: str, phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"pool": "p", "crawl": {"maxPages": 10}},
        "status": {"phase": phase, **status},
    }


def test_job_table_and_detail_render_without_markup_surprises() -> None:
    now = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    jobs = [
        _job("a", "Running", progress=40, counts={"total": 10, "succeeded": 4}, message="[/bad] markup"),
        _job("b", "Succeeded", progress=100, counts={"total": 3, "succeeded": 3}),
    ]
    table = text(render.jobs_table(jobs, now=now))
    assert "[/bad] markup" in table and "40%" in table and "5m" in table
    detail = _job(
        "a",
        "Failed",
        counts={"total": 3, "succeeded": 2, "deadLettered": 1},
        conditions=[{"type": "Failed", "status": "True", "reason": "TasksDeadLettered", "message": "1 URL [x]"}],
        deadLetters=[{"url": "https://a/[1]", "attempts": 3, "errorClass": "HTTP5xx", "lastError": "503 [/?#]"}],
        results={"sink": "RedisStream", "location": "redis: trawl:{ns/p}:j:u:res", "count": 2},
        eta="2026-01-01T00:09:00Z",
    )
    out = text(render.job_detail(detail, now=now))
    for piece in ("TasksDeadLettered", "https://a/[1]", "503 [/?#]", "trawl dlq list a", "trawl results a", "{ns/p}"):
        assert piece in out, piece
    assert "ETA" not in out  # a finished job keeps its last estimate on the status; not worth showing


def test_dead_letter_rendering() -> None:
    rec = DeadLetterRecord("t1", "https://a/x", 3, "HTTP5xx", "HTTP 503", 1767225600.0, [{"attempt": 1}])
    out = text(render.dead_letters_table([rec]))
    assert "https://a/x" in out and "HTTP5xx" in out and "2026-01-01T00:00:00Z" in out
    assert render.dead_letter_json(rec)["time"] == "2026-01-01T00:00:00Z"


class _FakeCluster:
    namespace = "ns"

    def __init__(self, phases: list[str]) -> None:
        self.phases = phases

    def get(self, kind: str, name: str) -> dict[str, Any]:
        return _job(name, self.phases.pop(0) if len(self.phases) > 1 else self.phases[0])


def test_follow_until_terminal_or_timeout() -> None:
    cluster: Any = _FakeCluster(["Queued", "Running", "Succeeded"])
    seen = [j["status"]["phase"] for j in follow(cluster, "a", sleep=lambda _: None)]
    assert seen == ["Queued", "Running", "Succeeded"]
    now = [0.0]

    def sleep(dt: float) -> None:
        now[0] += dt

    with pytest.raises(CliError) as info:
        list(follow(_FakeCluster(["Running"]), "a", timeout=3, clock=lambda: now[0], sleep=sleep))  # type: ignore[arg-type]
    assert info.value.code == EXIT_TIMEOUT and "phase Running" in info.value.message


class _StallingCluster:
    """Stalled for the first ``blip`` reads, then Running, then Stalled for good."""

    namespace = "ns"

    def __init__(self, blip: int) -> None:
        self.reads = 0
        self.blip = blip

    def get(self, kind: str, name: str) -> dict[str, Any]:
        self.reads += 1
        job = _job(name, "Running")
        if self.reads <= self.blip or self.reads > self.blip + 2:
            msg = "redis://r:6379 unreachable"
            job["status"]["conditions"] = [
                {"type": "Stalled", "status": "True", "reason": "RedisUnavailable", "message": msg}
            ]
        return job


def test_follow_ends_promptly_with_the_reason_when_the_job_stays_stalled() -> None:
    now = [0.0]

    def sleep(dt: float) -> None:
        now[0] += dt

    cluster: Any = _StallingCluster(blip=5)  # a 5 s blip (shorter than the grace) does not end the wait
    with pytest.raises(CliError) as info:
        list(follow(cluster, "a", stalled_grace=15, clock=lambda: now[0], sleep=sleep))
    assert info.value.code == EXIT_STALLED
    assert info.value.message == "ScrapeJob ns/a is stalled (RedisUnavailable): redis://r:6379 unreachable"
    assert cluster.reads == 5 + 2 + 16  # the blip, two healthy reads, then 15 s of stall
    assert now[0] == 5 + 2 + 15


def _kubeconfig(path: Any) -> Any:
    import yaml

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "scraping"}},
            {"name": "prod", "context": {"cluster": "c", "user": "u", "namespace": "crawlers"}},
            {"name": "bare", "context": {"cluster": "c", "user": "u"}},
        ],
        "current-context": "dev",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_connect_picks_the_namespace_like_kubectl(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from trawl.clitools.cluster import Cluster, Target
    from trawl.clitools.exits import EXIT_UNREACHABLE

    path = str(_kubeconfig(tmp_path / "config"))
    assert Cluster.connect(Target(path)).namespace == "scraping"
    assert Cluster.connect(Target(path, context="prod")).namespace == "crawlers"
    assert Cluster.connect(Target(path, context="bare")).namespace == "default"
    assert Cluster.connect(Target(path, context="prod", namespace="x")).namespace == "x"
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{path}")
    cluster = Cluster.connect(Target())
    assert cluster.namespace == "scraping" and cluster.server == "https://127.0.0.1:1"
    with pytest.raises(CliError) as info:
        Cluster.connect(Target(path, context="nope"))
    assert info.value.code == EXIT_UNREACHABLE and "nope" in info.value.message
    with pytest.raises(CliError, match="no kubeconfig found"):
        Cluster.connect(Target(str(tmp_path / "missing")))
    err = cluster.unreachable(ConnectionRefusedError(111, "Connection refused"))
    assert err.message == "cannot reach the Kubernetes API server at 127.0.0.1:1 (connection refused)"


async def test_a_reader_that_goes_away_closes_the_record_stream_at_once() -> None:
    """`trawl results JOB | head -1`: the pipe breaks mid-stream; the generator (which holds the Redis or
    PostgreSQL connection) must be closed by write_records itself, not left to asyncio's shutdown, which
    prints a traceback while finalizing it."""
    from trawl.clitools.results import write_records

    closed: list[bool] = []

    async def records() -> Any:
        try:
            for i in range(1000):
                yield {"url": f"https://a.example/{i}"}
        finally:
            closed.append(True)

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            if self.tell():
                raise BrokenPipeError(32, "Broken pipe")
            return super().write(text)

    gen = records()
    with pytest.raises(BrokenPipeError):
        await write_records(gen, "jsonl", ClosedPipe())
    assert closed == [True]
    assert gen.ag_frame is None  # finished, nothing left for the event loop's shutdown to finalize
