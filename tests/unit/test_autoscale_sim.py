"""The pool simulator: deterministic, conserves tasks, and shows the properties the bench reports."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from poolsim import sim
from poolsim.kedahpa import KedaHpaConfig
from poolsim.sim import PoolConfig, Trace, build_traces, percentile, simulate
from trawl.api.scrapepool import AutoscalingSpec
from trawl.autoscale.schedule import TICK_SECONDS

POOL = PoolConfig(AutoscalingSpec(min_replicas=0, max_replicas=10), KedaHpaConfig(max_replica_count=10))


def burst(n: int = 2000, at: float = 30.0, duration: float = 900.0) -> Trace:
    rng = random.Random(3)
    return Trace("burst", "test", duration, [(at + i * 1e-3, rng.randrange(50)) for i in range(n)])


def test_deterministic() -> None:
    a, b = simulate(burst(), POOL, "trawl", seed=4), simulate(burst(), POOL, "trawl", seed=4)
    assert (a.waits, a.replica_seconds, a.reasons) == (b.waits, b.replica_seconds, b.reasons)


def test_every_task_runs_and_the_pool_returns_to_zero() -> None:
    for policy in ("trawl", "keda_stock", "keda_tuned"):
        r = simulate(burst(), POOL, policy)
        assert r.started == r.tasks == r.completed
        assert r.samples[-1].replicas == 0, policy
        assert r.interrupted == 0


def test_trawl_reacts_faster_and_cheaper_on_a_burst() -> None:
    t, k = simulate(burst(), POOL, "trawl"), simulate(burst(), POOL, "keda_stock")
    assert t.p95_wait < k.p95_wait
    assert t.replica_seconds < k.replica_seconds


def test_long_tasks_trawl_interrupts_nothing() -> None:
    rng = random.Random(5)
    trace = Trace(
        "long",
        "test",
        1500.0,
        sorted((30 + rng.uniform(0, 10), rng.randrange(50)) for _ in range(200)),
        service_mean=120.0,
        service_sigma=0.5,
    )
    assert simulate(trace, POOL, "trawl").interrupted == 0
    assert simulate(trace, POOL, "keda_stock").interrupted > 0
    # A workload whose grace period covers its tasks (the trace's drain, given to every policy's pods):
    # KEDA's scale-downs of busy pods no longer interrupt them; every task runs once, to its end.
    graceful = replace(trace, drain_seconds=1200.0)
    for policy in ("trawl", "keda_stock", "keda_tuned"):
        r = simulate(graceful, POOL, policy)
        assert r.interrupted == 0 and r.completed == r.tasks, policy


def test_the_long_tasks_trace_sets_a_grace_period_that_covers_its_tasks() -> None:
    trace = next(t for t in build_traces(1, quick=True) if t.name == "long_tasks")
    assert trace.drain_seconds is not None and trace.drain_seconds >= 5 * trace.service_mean
    assert all(t.drain_seconds is None for t in build_traces(1, quick=True) if t.name != "long_tasks")


def test_failure_window_no_trawl_scale_up() -> None:
    rng = random.Random(7)
    arrivals = sorted((rng.uniform(0, 600), rng.randrange(50)) for _ in range(6000))  # 10/s
    trace = Trace("fail", "test", 600.0, arrivals, fail_windows=[(200.0, 400.0, 0.9)], fail_duration_factor=0.1)
    r = simulate(trace, POOL, "trawl")
    assert r.scale_ups_while_failing == 0
    assert r.failing_replica_seconds > 0


def test_percentile() -> None:
    assert percentile([], 0.95) == 0.0
    assert percentile([float(i) for i in range(1, 101)], 0.95) == 95.0


def test_rate_limited_backlog_stays_at_the_ceiling() -> None:
    trace = next(t for t in build_traces(1, quick=True) if t.name == "rate_limited")
    r = simulate(trace, POOL, "trawl")
    assert max(s.desired for s in r.samples) == 1  # 5 req/s x ~1.5 s per task fits in one pod's 32 slots
    assert r.started == r.tasks


def test_wait_beyond_politeness_on_a_rate_limited_domain() -> None:
    """With pods always serving, a rate-limited backlog's whole wait is the site's limit: the plain wait
    grows to n / rps while the wait beyond politeness stays zero; a late start shows in both."""
    trace = next(t for t in build_traces(1, quick=True) if t.name == "rate_limited")
    n, rps = len(trace.arrivals), next(iter(trace.domain_rps.values()))
    ref = simulate(trace, POOL, "static_max")
    assert ref.p95_raw_wait >= 0.9 * n / rps
    assert ref.p95_wait < 0.05
    trawl = simulate(trace, POOL, "trawl")  # starts from zero: activation + pod start-up
    assert POOL.startup_seconds <= trawl.p95_wait <= POOL.startup_seconds + 2 * POOL.autoscaling.poll_seconds
    assert trawl.p95_raw_wait > ref.p95_raw_wait


def test_keda_tuned_uses_trawls_settings_and_the_workers_concurrency() -> None:
    pool = PoolConfig(
        AutoscalingSpec(max_replicas=10, poll_seconds=5, scale_down_delay_seconds=60, idle_seconds_before_zero=120),
        KedaHpaConfig(max_replica_count=10),
        concurrency=32,
    )
    k = pool.keda_tuned
    assert (k.polling_interval, k.scale_down_stabilization, k.cooldown_period, k.list_length) == (5, 60, 120, 32)
    assert (k.hpa_sync_period, k.max_replica_count) == (pool.keda.hpa_sync_period, 10)  # the rest stays stock


def test_the_poll_phase_varies_with_the_seed() -> None:
    a, b = simulate(burst(), POOL, "trawl", seed=1), simulate(burst(), POOL, "trawl", seed=2)
    assert a.reasons[0][0] != b.reasons[0][0]  # the first decision lands at another time


def test_trawl_passes_on_the_controllers_timer_regular_follow_up_and_burst(monkeypatch: Any) -> None:
    """The simulator ticks like the controller's pool timer (trawl.autoscale.schedule): scheduled passes
    pollSeconds apart, FOLLOW_UP_SECONDS after a decision that asks for a follow-up (rule 10), and a
    burst pass at the first tick after a worker's slots of new tasks arrived beyond the measured rate
    (rule 11), which leaves the scheduled cadence where it was."""
    passes: list[tuple[float, bool, bool]] = []  # (time, scheduled, follow-up asked)
    real = sim.Simulation._trawl_poll

    def recording(self: sim.Simulation, *, scheduled: bool) -> None:
        real(self, scheduled=scheduled)
        passes.append((self.now, scheduled, self.schedule.follow_up))

    monkeypatch.setattr(sim.Simulation, "_trawl_poll", recording)
    # A burst arriving over 10 s (as in spiky_bursts), after a quiet start.
    rng = random.Random(7)
    trace = Trace("spread", "test", 300.0, sorted((30 + rng.uniform(0, 10), rng.randrange(50)) for _ in range(3000)))
    simulate(trace, POOL, "trawl")
    assert any(follow for _, _, follow in passes), "the burst's scale-up asked for a follow-up"
    bursts = [t for t, scheduled, _ in passes if not scheduled]
    assert bursts, "the burst brought a pass forward"
    first_after = min(t for t, _, _ in passes if t >= 30)
    assert first_after < 30 + TICK_SECONDS + 1e-6  # the first tick after the burst began
    last_scheduled, follow_from = None, None
    for t, scheduled, follow in passes:
        if scheduled and last_scheduled is not None:
            if follow_from is not None:  # a follow-up was asked: the next tick after the pass that asked
                assert t - follow_from == pytest.approx(TICK_SECONDS)
            else:
                assert t - last_scheduled == pytest.approx(POOL.autoscaling.poll_seconds)
        if scheduled:
            last_scheduled = t
        follow_from = t if follow else None
