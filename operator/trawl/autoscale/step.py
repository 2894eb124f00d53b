"""One call per poll, shared by the controller and the simulator: snapshot in, decision out.

    state = None
    every spec.autoscaling.pollSeconds:
        signals = await queue.pool_signals()
        result = plan(pool.spec, signals, deployment_replicas, state,
                      jobs=jobs_by_pool_index_entries, pod_startups=measured_pods)
        state = result.state
        write result.cordoned to the queue (workers of those pods claim nothing new)
        if result.decision.changed: mark idle pods cheapest to delete, then patch the scale subresource

:func:`plan` is the only place an :class:`Observation` is built: from the queue snapshot, the smoothed
rates, the rate-limit ceiling of the jobs' backlog and the measured pod start-up. The controller
(``trawl.operator.pool.scaling``) and the simulator (``poolsim.sim``) both call it, so the
simulated policy knows exactly what the real one knows. Pure: it composes
:func:`trawl.autoscale.rates.track`, :func:`trawl.autoscale.startup.record` and
:func:`trawl.autoscale.policy.decide`, and picks the workers to cordon (policy rule 8) from the
snapshot's per-worker in-flight counts with :func:`trawl.autoscale.policy.choose_cordoned`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trawl.api.scrapepool import AutoscalingSpec, ScrapePoolSpec
from trawl.queue.model import PoolSignals

from .backlog import domain_backlog
from .policy import Decision, Observation, ScalerState, choose_cordoned, decide
from .rates import DEFAULT_TAU_SECONDS, Rates, RateTracker, rate_limit_ceiling, track
from .startup import DEFAULT_STARTUP_SECONDS, StartupEstimate, record


@dataclass(frozen=True, slots=True)
class PoolScalerState:
    """Everything kept between polls of one pool. Losing it (operator restart) is safe: rates and
    start-up are measured again and a pending scale-down waits its delay again."""

    rates: RateTracker | None = None
    policy: ScalerState = field(default_factory=ScalerState)
    startup: StartupEstimate = field(default_factory=StartupEstimate)
    cordoned: frozenset[str] = frozenset()  # workers told to stop claiming at the last poll


@dataclass(frozen=True, slots=True)
class StepResult:
    decision: Decision
    rates: Rates
    state: PoolScalerState
    observation: Observation | None = None
    cordoned: frozenset[str] = frozenset()  # workers that must not claim new tasks (policy rule 8)


def observation(
    signals: PoolSignals,
    rates: Rates,
    current_replicas: int,
    *,
    concurrency: int,
    drain_seconds: float,
    rate_limit_ceiling_replicas: int | None = None,
    startup_seconds: float = DEFAULT_STARTUP_SECONDS,
) -> Observation:
    """The policy's input from a snapshot and the smoothed rates."""
    return Observation(
        now=signals.time,
        current_replicas=current_replicas,
        ready=signals.ready,
        delayed_due_soon=signals.delayed_due_soon,
        in_flight=signals.in_flight,
        busy_workers=rates.busy_workers,
        arrival_rate=rates.arrival_rate,
        per_worker_throughput=rates.per_worker_throughput,
        mean_service_seconds=rates.mean_service_seconds,
        failure_rate=rates.failure_rate,
        rate_limit_ceiling_replicas=rate_limit_ceiling_replicas,
        concurrency=concurrency,
        drain_seconds=drain_seconds,
        serving_workers=rates.active_workers,
        startup_seconds=startup_seconds,
        recent_attempts=rates.recent_attempts,
        recent_failed=rates.recent_failed,
        recent_arrival_rate=rates.recent_arrival_rate,
        arrival_rate_stderr=rates.arrival_rate_stderr,
        retry_rate=rates.failed_rate,
        worker_loads=tuple(a.in_flight for a in signals.workers.values() if not a.draining),
    )


def step(
    spec: AutoscalingSpec,
    signals: PoolSignals,
    current_replicas: int,
    state: PoolScalerState | None = None,
    *,
    concurrency: int = 32,
    drain_seconds: float = 30.0,
    rate_limit_ceiling_replicas: int | None = None,
    tau_seconds: float = DEFAULT_TAU_SECONDS,
    startup_seconds: float | None = None,
) -> StepResult:
    """Fold ``signals`` into the rates, decide, and return the decision with the next state.

    ``startup_seconds`` None: the state's start-up estimate (measured, else the default)."""
    st = state or PoolScalerState()
    tracker = track(st.rates, signals, concurrency=concurrency, tau_seconds=tau_seconds)
    obs = observation(
        signals,
        tracker.rates,
        current_replicas,
        concurrency=concurrency,
        drain_seconds=drain_seconds,
        rate_limit_ceiling_replicas=rate_limit_ceiling_replicas,
        startup_seconds=st.startup.seconds if startup_seconds is None else startup_seconds,
    )
    decision = decide(spec, obs, st.policy)
    serving = {w: a.in_flight for w, a in signals.workers.items() if not a.draining}
    cordoned = choose_cordoned(serving, decision.cordon, st.cordoned)
    state = PoolScalerState(tracker, decision.state, st.startup, cordoned)
    return StepResult(decision, tracker.rates, state, obs, cordoned)


def plan(
    pool: ScrapePoolSpec,
    signals: PoolSignals,
    current_replicas: int,
    state: PoolScalerState | None = None,
    *,
    jobs: Iterable[Mapping[str, Any]] = (),
    pod_startups: Iterable[tuple[str, float]] = (),
) -> StepResult:
    """The controller's (and the simulator's) poll: record newly measured pod start-ups, compute the
    rate-limit ceiling from the jobs' backlog (jobs-by-pool index entries), then :func:`step`."""
    st = state or PoolScalerState()
    st = PoolScalerState(st.rates, st.policy, record(st.startup, pod_startups), st.cordoned)
    backlog = domain_backlog(jobs, pool)
    mean_service = st.rates.rates.mean_service_seconds if st.rates else None
    ceiling = (
        rate_limit_ceiling(backlog, mean_service_seconds=mean_service, concurrency=pool.worker.concurrency)
        if backlog
        else None
    )
    return step(
        pool.autoscaling,
        signals,
        current_replicas,
        st,
        concurrency=pool.worker.concurrency,
        drain_seconds=pool.worker.drain_seconds,
        rate_limit_ceiling_replicas=ceiling,
    )
