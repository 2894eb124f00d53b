"""The operator's autoscaler glue: which hosts a job's work goes to, and the rate-limit ceiling input."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.autoscale.policy import FOLLOW_UP_SECONDS, ScalerState
from trawl.autoscale.step import PoolScalerState
from trawl.operator.pool.handlers import POOL_SYNC_SECONDS, POOL_TICK_SECONDS, pool_poll_seconds
from trawl.operator.pool.scaling import Autoscalers, domain_backlog, job_hosts
from trawl.queue.model import PoolSignals, WorkerActivity

POOL = ScrapePoolSpec.model_validate(
    {"redis": {"url": "redis://r:6379"}, "defaults": {"politeness": {"requestsPerSecond": 3}}}
)


def test_job_hosts_from_urls_and_ranges() -> None:
    spec = {"urls": ["http://A.example/x", "https://b.example/"], "urlRanges": [{"template": "http://c.example/{n}"}]}
    assert job_hosts(spec) == ["a.example", "b.example", "c.example"]


def test_too_many_hosts_is_unbounded() -> None:
    assert job_hosts({"urls": [f"http://h{i}.example/" for i in range(40)]}) is None


def test_backlog_uses_pool_defaults_and_job_overrides() -> None:
    jobs = [
        {"waiting": 100, "hosts": ["a.example"], "politeness": {}},
        {"waiting": 50, "hosts": ["a.example"], "politeness": {"requestsPerSecond": 1}},
        {"waiting": 0, "hosts": ["idle.example"], "politeness": {}},
    ]
    backlog = domain_backlog(jobs, POOL)
    assert backlog is not None
    assert set(backlog) == {"a.example"}
    assert backlog["a.example"].tasks == 150
    assert backlog["a.example"].requests_per_second == 1  # the strictest limit on a shared domain wins


def test_unknown_hosts_make_the_ceiling_unbounded() -> None:
    assert domain_backlog([{"waiting": 5, "hosts": None, "politeness": {}}], POOL) is None


def test_pool_timer_interval_is_poll_seconds_when_autoscaling() -> None:
    assert pool_poll_seconds({"autoscaling": {"pollSeconds": 7}}) == 7
    assert pool_poll_seconds({"autoscaling": {}}) == max(POOL_TICK_SECONDS, 5)  # the API default
    assert pool_poll_seconds({"autoscaling": {"enabled": False, "pollSeconds": 7}}) == POOL_SYNC_SECONDS
    assert pool_poll_seconds({"autoscaling": {"pollSeconds": "x"}}) == POOL_SYNC_SECONDS  # reported by reconcile


def test_pods_are_listed_for_startup_only_when_the_ready_count_changes() -> None:
    a, key = Autoscalers(), ("ns", "p")
    assert not a.wants_startups(key, 0)  # nothing ready: nothing to measure
    assert a.wants_startups(key, 2)  # pods became ready
    assert not a.wants_startups(key, 2)  # same count: no list on this poll
    assert a.wants_startups(key, 3)
    a.forget(key)
    assert a.wants_startups(key, 3)  # after a restart (or a re-created pool): measure again


def _signals(t: float, workers: dict[str, tuple[int, bool]], ready: int = 0) -> PoolSignals:
    return PoolSignals(
        ready=ready,
        delayed=0,
        delayed_due_soon=0,
        in_flight=sum(n for n, _ in workers.values()),
        dead=0,
        completed_total=0,
        failed_total=0,
        service_seconds_total=0.0,
        workers={w: WorkerActivity(w, n, t, draining) for w, (n, draining) in workers.items()},
        time=t,
    )


def test_advice_names_the_cordoned_pods_and_says_when_to_write_them() -> None:
    """Eight pods hold 40 tasks of unknown length (kept by rule 3) after a window of low answers and
    nothing arrives: the busiest pod's free slots hold what may arrive (rule 9, packing), so the seven
    others are cordoned, least busy first (a draining one is never chosen); the set is written while
    it is or was non-empty."""
    a, key, t = Autoscalers(), ("ns", "p"), 10_000.0
    a.states[key] = PoolScalerState(
        policy=ScalerState(last_change_at=t - 1000, answers=((t - 30, 1),), answers_since=t - 61)
    )
    pods = {f"p{i}": (n, False) for i, n in enumerate([9, 1, 2, 3, 4, 5, 6, 7])} | {"gone": (3, True)}
    now = datetime.fromtimestamp(t, UTC)
    advice = a.advise(key, POOL, _signals(t, pods), 8, now)
    assert advice.desired == 8
    assert advice.cordoned == {"p1", "p2", "p3", "p4", "p5", "p6", "p7"}
    assert advice.write_cordon
    advice = a.advise(key, POOL, _signals(t + 5, pods, ready=100), 8, now)  # a backlog: every slot counts
    assert advice.cordoned == frozenset()
    assert advice.write_cordon  # lifted: written once more
    advice = a.advise(key, POOL, _signals(t + 10, pods, ready=100), 8, now)
    assert not advice.write_cordon


def test_each_decision_is_logged_at_info_when_it_changes_and_at_debug_when_it_repeats(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator log says why a pool scaled or held: one line per pass, INFO when the replicas, the
    action or the cordoned pods change (with each worker's load, the arrivals and the start-up used)."""
    a, key, t = Autoscalers(), ("ns", "p"), 10_000.0
    a.states[key] = PoolScalerState(
        policy=ScalerState(last_change_at=t - 1000, answers=((t - 30, 1),), answers_since=t - 61)
    )
    pods = {f"p{i}": (n, False) for i, n in enumerate([9, 1, 2, 3, 4, 5, 6, 7])}
    now = datetime.fromtimestamp(t, UTC)
    caplog.set_level(logging.DEBUG, logger="trawl.operator.autoscaling")

    def levels() -> list[tuple[int, str]]:
        out = [(r.levelno, r.getMessage()) for r in caplog.records]
        caplog.clear()
        return out

    a.advise(key, POOL, _signals(t, pods), 8, now)
    ((level, line),) = levels()
    assert level == logging.INFO
    assert line.startswith("pool ns/p: Hold 8→8, cordoned ['p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7'], ")
    assert "loads [9, 7, 6, 5, 4, 3, 2, 1]" in line and "start-up 15.0s" in line
    a.advise(key, POOL, _signals(t + 1, pods), 8, now)
    assert [lv for lv, _ in levels()] == [logging.DEBUG]  # the same decision again
    a.advise(key, POOL, _signals(t + 2, pods, ready=100), 8, now)  # a backlog: the cordon is lifted
    ((level, line),) = levels()
    assert level == logging.INFO and ", cordoned [], " in line


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_burst_scale_up_brings_the_next_pass_forward_once() -> None:
    """Policy rule 10 in the controller: after a scale-up into a burst the pool's next pass comes after
    FOLLOW_UP_SECONDS, not pollSeconds; the pass itself clears it (also one that fails before deciding)."""
    clock = FakeClock(500.0)
    a, key, t = Autoscalers(clock=clock), ("ns", "p"), 10_000.0
    now = datetime.fromtimestamp(t, UTC)
    assert a.pass_due(key, 5.0)  # never passed: at once
    a.pass_started(key)
    a.states[key] = PoolScalerState(policy=ScalerState(last_change_at=t - 1000))
    advice = a.advise(key, POOL, _signals(t, {"p0": (32, False)}, ready=3000), 1, now)
    assert advice.action == "ScaleUp"
    clock.t += FOLLOW_UP_SECONDS
    assert a.pass_due(key, 5.0)
    a.pass_started(key)  # the follow-up; it fails before deciding
    clock.t += FOLLOW_UP_SECONDS
    assert not a.pass_due(key, 5.0)
    clock.t += 5.0
    assert a.pass_due(key, 5.0)
    a.forget(key)
    assert key not in a.schedules


async def test_a_burst_in_the_enqueue_counter_brings_a_pass_forward_without_moving_the_cadence() -> None:
    """Policy rule 11 in the controller: between passes a tick reads the counter the last pass handed
    over; a worker's slots of new tasks beyond the measured rate make the pass due now. A counter that
    fails or hangs is no burst, and a pass that has not decided yet has no baseline."""
    clock = FakeClock(500.0)
    a, key, t = Autoscalers(clock=clock), ("ns", "p"), 10_000.0
    now = datetime.fromtimestamp(t, UTC)
    counter = {"n": 100}

    async def enqueued() -> int:
        return counter["n"]

    a.pass_started(key)
    a.advise(key, POOL, _signals(t, {"p0": (0, False)})._replace(enqueued_total=100), 1, now, enqueue_counter=enqueued)
    clock.t += 1
    assert not a.pass_due(key, 5.0)
    assert not await a.burst_due(key)
    counter["n"] = 100 + POOL.worker.concurrency
    assert await a.burst_due(key)
    a.pass_started(key, scheduled=False)
    assert not await a.burst_due(key)  # no baseline until this pass decides
    clock.t += 1
    assert not a.pass_due(key, 5.0)  # the burst pass left the cadence alone: due 5 s after 500
    clock.t = 505.0
    assert a.pass_due(key, 5.0)

    async def failing() -> int:
        raise ConnectionError("redis down")

    async def hanging() -> int:
        await asyncio.sleep(3600)
        return 0

    for broken in (failing, hanging):
        a.pass_started(key)
        a.advise(key, POOL, _signals(t, {"p0": (0, False)})._replace(enqueued_total=0), 1, now, enqueue_counter=broken)
        assert not await a.burst_due(key)


def test_work_a_tenants_quota_holds_back_does_not_scale_the_pool() -> None:
    from trawl.autoscale.step import plan

    held = _signals(1000.0, {})._replace(held=5000)  # a throttled tenant's backlog: no more workers run it
    assert plan(POOL, held, 0).decision.desired == 0
    runnable = _signals(1000.0, {}, ready=5000)._replace(held=5000)
    assert plan(POOL, runnable, 0).decision.desired >= 1  # the same backlog, runnable: the pool activates
