"""Per-pool and per-job gauges of the operator: what the alerts and the dashboard read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from trawl.operator import metrics
from trawl.redisconn.memory import RedisMemory


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    metrics._pools.clear()
    metrics._jobs.clear()
    metrics._job_phases.clear()


Key = tuple[str, frozenset[tuple[str, str]]]


def _samples(now: float) -> dict[Key, float]:
    collector = metrics._ObjectCollector(clock=lambda: now)
    return {(s.name, frozenset(s.labels.items())): s.value for f in collector.collect() for s in f.samples}


def _key(name: str, *labels: tuple[str, str]) -> Key:
    return (name, frozenset(labels))


def _pool_status(ready: int, throughput: float, **more: Any) -> dict[str, Any]:
    return {
        "queue": {"ready": ready, "delayed": 2, "inFlight": 3, "dead": 4, "throughputPerSecond": throughput},
        "desiredReplicas": 5,
        "readyReplicas": 1,
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "True"}],
        **more,
    }


def test_pool_gauges_and_a_backlog_that_stops_moving() -> None:
    pool = (("namespace", "ns"), ("pool", "p"))
    metrics.record_pool("ns", "p", _pool_status(10, 3.0), now=100.0)
    s = _samples(now=130.0)
    assert s[_key("trawl_pool_backlog_tasks", *pool)] == 10
    assert s[_key("trawl_pool_delayed_tasks", *pool)] == 2
    assert s[_key("trawl_pool_in_flight_tasks", *pool)] == 3
    assert s[_key("trawl_pool_dead_letters", *pool)] == 4
    assert s[_key("trawl_pool_desired_replicas", *pool)] == 5
    assert s[_key("trawl_pool_ready_replicas", *pool)] == 1
    assert s[_key("trawl_pool_condition", *pool, ("condition", "Degraded"))] == 1
    assert s[_key("trawl_pool_condition", *pool, ("condition", "Stalled"))] == 0
    assert s[_key("trawl_pool_backlog_stalled_seconds", *pool)] == 0  # tasks complete: moving
    # No completions from t=200 on while tasks wait: the backlog ages from the last time it moved.
    metrics.record_pool("ns", "p", _pool_status(10, 0.0), now=200.0)
    metrics.record_pool("ns", "p", _pool_status(10, 0.0), now=260.0)
    assert _samples(now=400.0)[_key("trawl_pool_backlog_stalled_seconds", *pool)] == 300.0
    metrics.record_pool("ns", "p", _pool_status(0, 0.0, queue={"ready": 0, "delayed": 0}), now=410.0)
    assert _samples(now=500.0)[_key("trawl_pool_backlog_stalled_seconds", *pool)] == 0
    metrics.forget_pool("ns", "p")
    assert not any(name.startswith("trawl_pool_") for name, _ in _samples(now=500.0))


def test_job_gauges_follow_the_status_and_go_with_the_job() -> None:
    status = {"phase": "Failed", "counts": {"total": 9, "succeeded": 7, "deadLettered": 2}}
    metrics.record_job("uid-1", "ns", "j", "p", status)
    s = _samples(now=0.0)
    labels = (("scrapejob", "j"), ("namespace", "ns"), ("pool", "p"), ("pool_namespace", "ns"))
    assert s[_key("trawl_job_phase", *labels, ("phase", "Failed"))] == 1
    assert s[_key("trawl_job_phase", *labels, ("phase", "Running"))] == 0
    assert s[_key("trawl_job_tasks", *labels, ("state", "deadLettered"))] == 2
    assert s[_key("trawl_job_tasks", *labels, ("state", "pending"))] == 0
    # What the gauges read, not the status: 10,000 copies of whole statuses were 40 MB of the operator.
    assert not any(isinstance(v, dict) for v in metrics._jobs["uid-1"])
    metrics.forget_job("uid-1")
    assert not any(name.startswith("trawl_job_") for name, _ in _samples(now=0.0))


def test_the_pools_redis_memory_is_exported_and_kept_while_a_pass_cannot_read_it() -> None:
    pool = (("namespace", "ns"), ("pool", "p"))
    metrics.record_pool("ns", "p", _pool_status(0, 0.0), now=1.0)
    assert _key("trawl_pool_redis_memory_used_bytes", *pool) not in _samples(now=1.0)  # nothing read yet
    metrics.record_pool("ns", "p", _pool_status(0, 0.0), now=2.0, redis_memory=RedisMemory(300, 400, "noeviction"))
    metrics.record_pool("ns", "p", _pool_status(0, 0.0), now=3.0)  # a pass that did not read it (Redis down)
    s = _samples(now=3.0)
    assert (
        s[_key("trawl_pool_redis_memory_used_bytes", *pool)],
        s[_key("trawl_pool_redis_memory_max_bytes", *pool)],
    ) == (
        300,
        400,
    )
    metrics.forget_pool("ns", "p")
    assert _key("trawl_pool_redis_memory_used_bytes", *pool) not in _samples(now=3.0)
