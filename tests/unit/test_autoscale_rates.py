"""Rates from successive queue snapshots, the rate-limit ceiling, and the controller's one-call step."""

from __future__ import annotations

from typing import Any

import pytest

from trawl.api.scrapepool import AutoscalingSpec
from trawl.autoscale import DomainBacklog, PoolScalerState, rate_limit_ceiling, step, track
from trawl.queue.model import PoolSignals, WorkerActivity


def snap(t: float, **kw: Any) -> PoolSignals:
    workers = kw.pop("workers", None)
    if workers is None:
        n, per = kw.pop("n_workers", 2), kw.pop("per_worker_in_flight", 0)
        workers = {f"w{i}": WorkerActivity(f"w{i}", per, t) for i in range(n)}
    base: dict[str, Any] = {
        "ready": 0,
        "delayed": 0,
        "delayed_due_soon": 0,
        "in_flight": 0,
        "dead": 0,
        "completed_total": 0,
        "failed_total": 0,
        "service_seconds_total": 0.0,
        "workers": workers,
        "time": t,
    }
    base.update(kw)
    return PoolSignals(**base)


def test_first_snapshot_has_no_rates() -> None:
    tr = track(None, snap(100.0, n_workers=3, per_worker_in_flight=1), concurrency=32)
    assert tr.rates.throughput == 0 and tr.rates.per_worker_throughput is None
    assert tr.rates.failure_rate is None and tr.rates.mean_service_seconds is None
    assert (tr.rates.active_workers, tr.rates.busy_workers) == (3, 3)


def test_rates_converge_to_the_true_values() -> None:
    # 2 saturated workers finish 40 attempts/s, 10 % failing, 1.5 s each (60 in flight); 45/s arrive.
    tr = None
    for i in range(60):
        t = 5.0 * i
        done = 200 * i
        tr = track(
            tr,
            snap(
                t,
                ready=100 + 25 * i,
                in_flight=60,
                completed_total=int(done * 0.9),
                failed_total=done - int(done * 0.9),
                service_seconds_total=1.5 * done,
                per_worker_in_flight=32,
            ),
            concurrency=32,
        )
    assert tr is not None
    r = tr.rates
    assert r.throughput == pytest.approx(40, rel=0.02)
    assert r.failure_rate == pytest.approx(0.1, abs=0.01)
    assert r.mean_service_seconds == pytest.approx(1.5, rel=0.01)
    assert r.per_worker_throughput == pytest.approx(20, rel=0.02)
    assert r.arrival_rate == pytest.approx(45, rel=0.02)


def test_a_queue_running_dry_between_polls_does_not_lower_the_capacity() -> None:
    # One worker at the edge of keeping up: its 32 slots are full at every poll (a few tasks ready), but
    # the queue ran dry for moments in between, so it finished only 95 tasks of 1.5 s in 5 s (19/s).
    # Its capacity is what its slots do (32 / 1.5 s ~ 21.3/s), not what the arrivals let it do.
    tr = None
    for i in range(20):
        tr = track(
            tr,
            snap(5.0 * i, ready=2, in_flight=32, completed_total=95 * i, service_seconds_total=1.5 * 95 * i,
                 n_workers=1, per_worker_in_flight=32),
            concurrency=32,
        )  # fmt: skip
    assert tr is not None and tr.rates.per_worker_throughput == pytest.approx(32 / 1.5, rel=0.02)


def test_unsaturated_workers_do_not_define_capacity() -> None:
    tr = track(None, snap(0.0, per_worker_in_flight=1, in_flight=2), concurrency=32)
    tr = track(
        tr,
        snap(5.0, per_worker_in_flight=1, in_flight=2, completed_total=10, service_seconds_total=10.0),
        concurrency=32,
    )
    assert tr.rates.per_worker_throughput is None  # 1 task/s per worker says nothing about capacity
    assert tr.rates.mean_service_seconds == pytest.approx(1.0)


def _fast_crawl_then(tail: list[dict[str, Any]]) -> list[float | None]:
    """Two saturated workers finish 20 pages/s each (1.5 s per page), then the ``tail`` snapshots
    (cumulative counters continue from the crawl); per-worker throughput after each tail snapshot."""
    tr = None
    for i in range(20):
        done = 200 * i
        tr = track(
            tr,
            snap(5.0 * i, ready=500, in_flight=60, completed_total=done, service_seconds_total=1.5 * done,
                 per_worker_in_flight=30),
            concurrency=32,
        )  # fmt: skip
    assert tr is not None and tr.rates.per_worker_throughput == pytest.approx(20, rel=0.05)
    out: list[float | None] = []
    for kw in tail:
        tr = track(tr, snap(**kw), concurrency=32)
        out.append(tr.rates.per_worker_throughput)
    return out


def test_throughput_of_earlier_work_does_not_size_slow_work() -> None:
    # After a fast crawl, a backlog of 30 s pages that per-domain limits keep at 16 of 32 slots per
    # worker (never saturated, nothing ready: the rest waits delayed). The fast crawl's 20/s must not
    # stay the capacity: it falls to what the slow pages allow (32 slots / 30 s ~ 1.07/s) at once,
    # once the slow pages' service time is measured.
    base_done, base_service = 200 * 19, 1.5 * 200 * 19
    tail = [
        {
            "t": 95.0 + 5.0 * k,
            "delayed": 400,
            "in_flight": 32,
            "per_worker_in_flight": 16,
            "completed_total": base_done + 5 * k,
            "service_seconds_total": base_service + 30.0 * 5 * k,
        }
        for k in range(1, 41)
    ]
    per_worker = _fast_crawl_then(tail)
    assert all(v is not None for v in per_worker)
    assert per_worker[-1] is not None and per_worker[-1] <= 32 / 30 * 1.3


def test_saturated_intervals_without_a_finish_lower_the_throughput() -> None:
    # Slow pages with a ready backlog: whole polls pass with nothing finished; they are measurements.
    base_done, base_service = 200 * 19, 1.5 * 200 * 19
    tail = [
        {
            "t": 95.0 + 5.0 * k,
            "ready": 300,
            "in_flight": 64,
            "per_worker_in_flight": 32,
            "completed_total": base_done,
            "service_seconds_total": base_service,
        }
        for k in range(1, 13)
    ]
    per_worker = _fast_crawl_then(tail)
    assert per_worker[-1] is not None and per_worker[-1] < 20 * 0.1


def test_an_unrefreshed_throughput_ages_toward_the_current_work() -> None:
    # The pool sits unsaturated on 6 s tasks (a few in flight): the 20/s measured earlier moves toward
    # 32 / 6 s ~ 5.3/s within a few minutes, never in one poll.
    base_done, base_service = 200 * 19, 1.5 * 200 * 19
    tail = [
        {
            "t": 95.0 + 5.0 * k,
            "in_flight": 2,
            "per_worker_in_flight": 1,
            "completed_total": base_done + k,
            "service_seconds_total": base_service + 6.0 * k,
        }
        for k in range(1, 61)
    ]
    per_worker = _fast_crawl_then(tail)
    assert per_worker[0] is not None and per_worker[0] > 5.4
    assert per_worker[-1] == pytest.approx(32 / 6, rel=0.1)


def test_failure_rate_rises_fast() -> None:
    tr = None
    for i in range(20):
        tr = track(tr, snap(5.0 * i, completed_total=100 * i, service_seconds_total=100.0 * i), concurrency=32)
    assert tr is not None and tr.rates.failure_rate == pytest.approx(0.0)
    tr = track(tr, snap(100.0, completed_total=1905, failed_total=95, service_seconds_total=2000.0), concurrency=32)
    assert tr.rates.failure_rate is not None and tr.rates.failure_rate >= 0.9
    assert tr.rates.smoothed_failure_rate is not None and tr.rates.smoothed_failure_rate < 0.5


def test_counter_reset_starts_over() -> None:
    tr = track(None, snap(0.0, completed_total=1000, service_seconds_total=1000.0), concurrency=32)
    tr = track(tr, snap(5.0, completed_total=3), concurrency=32)
    assert tr.rates.throughput == 0 and tr.last.completed_total == 3


def test_stale_and_draining_workers_are_not_capacity() -> None:
    workers = {
        "a": WorkerActivity("a", 3, 100.0),
        "b": WorkerActivity("b", 0, 100.0),
        "c": WorkerActivity("c", 5, 100.0, draining=True),
        "d": WorkerActivity("d", 5, 10.0),
    }
    tr = track(None, snap(100.0, workers=workers), concurrency=32)
    assert (tr.rates.active_workers, tr.rates.busy_workers) == (2, 1)


def test_same_time_snapshot_is_ignored() -> None:
    tr = track(None, snap(10.0, completed_total=5), concurrency=32)
    again = track(tr, snap(10.0, completed_total=50), concurrency=32)
    assert again.last.completed_total == 5


@pytest.mark.parametrize(
    ("domains", "service", "expected"),
    [
        ([], 1.0, None),
        ([DomainBacklog(10, None)], 1.0, None),
        ([DomainBacklog(3000, 5.0)], 1.5, 1),  # 7.5 slots, 32 per worker
        ([DomainBacklog(3000, 50.0)], 2.0, 4),  # 100 slots
        ([DomainBacklog(3000, 50.0), DomainBacklog(10, None)], 2.0, None),  # one unlimited domain: unbounded
        ([DomainBacklog(3000, 50.0, max_concurrency=4)], 2.0, 1),
        ([DomainBacklog(5, 50.0)] * 40, 2.0, 7),  # 40 domains x 5 tasks = 200 slots at most
        ([DomainBacklog(0, 1.0)], 2.0, None),
    ],
)
def test_rate_limit_ceiling(domains: list[DomainBacklog], service: float, expected: int | None) -> None:
    assert rate_limit_ceiling(domains, mean_service_seconds=service, concurrency=32) == expected


def test_step_keeps_everything_the_controller_needs() -> None:
    spec = AutoscalingSpec(min_replicas=0, max_replicas=10)
    r1 = step(spec, snap(0.0, n_workers=0), 0, None)
    assert r1.decision.desired == 0
    r2 = step(spec, snap(5.0, ready=500, n_workers=0), 0, r1.state)
    assert r2.decision.changed and r2.decision.desired >= 1
    assert isinstance(r2.state, PoolScalerState) and r2.state.rates is not None
    assert r2.state.rates.last.time == 5.0
    # Replaying the same inputs gives the same answer: the state is all there is.
    assert step(spec, snap(5.0, ready=500, n_workers=0), 0, r1.state) == r2


def test_a_slow_backlog_after_a_fast_crawl_grows_the_pool_within_a_few_polls() -> None:
    """Seen on a real cluster: one worker (4 slots) crawled 50 ms pages (80/s measured), then a backlog
    of 3 s pages stayed at one pod while the old throughput slowly decayed. The capacity now follows the
    slow pages' service time at once, so the pool grows within a few polls."""
    spec = AutoscalingSpec(min_replicas=0, max_replicas=10, target_drain_seconds=10)
    state: PoolScalerState | None = None
    done, service = 0, 0.0
    for i in range(12):  # the fast crawl: saturated, 400 pages per 5 s poll
        state = step(
            spec,
            snap(5.0 * i, ready=50, in_flight=4, completed_total=done, service_seconds_total=service,
                 n_workers=1, per_worker_in_flight=4),
            1, state, concurrency=4,
        ).state  # fmt: skip
        done, service = done + 400, service + 400 * 0.05
    desired = []
    for k in range(1, 4):  # the slow backlog: 4 slots full, 3 s pages, about 7 finish per poll
        result = step(
            spec,
            snap(55.0 + 5.0 * k, ready=100 - 7 * k, in_flight=4, completed_total=done + 7 * k,
                 service_seconds_total=service + 3.0 * 7 * k, n_workers=1, per_worker_in_flight=4),
            1, state, concurrency=4,
        )  # fmt: skip
        state = result.state
        desired.append(result.decision.desired)
    assert desired[-1] > 1, desired


def test_a_throughput_follows_work_that_got_faster() -> None:
    # After the fast crawl (20/s per worker at 1.5 s a page) the target starts failing in 0.15 s: few
    # slots busy (never saturated), 100 attempts per 5 s. The per-worker throughput rises as the service
    # time falls (the workers' slots turn over faster), not a minute later, and never above the slots'
    # Little's-law bound of the current work.
    base_done, base_service = 200 * 19, 1.5 * 200 * 19
    tail = [
        {
            "t": 95.0 + 5.0 * k,
            "in_flight": 2,
            "per_worker_in_flight": 1,
            "completed_total": base_done + 100 * k,
            "service_seconds_total": base_service + 0.15 * 100 * k,
        }
        for k in range(1, 5)
    ]
    per_worker = _fast_crawl_then(tail)
    assert all(v is not None for v in per_worker)
    assert per_worker[-1] is not None and per_worker[-1] > 2.5 * 20
    assert per_worker[-1] <= 32 / 0.15
