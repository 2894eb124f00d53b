"""One call per poll for the controller: snapshot in, decision out, state kept by the caller.

    state = None
    every poll_seconds:
        signals = await queue.pool_signals()
        result = step(pool.spec.autoscaling, signals, deployment_replicas, state,
                      concurrency=pool.spec.worker.concurrency, drain_seconds=pool.spec.worker.drain_seconds)
        state = result.state
        if result.decision.changed: mark idle pods cheapest to delete, then patch the scale subresource

Pure: it composes :func:`trawl.autoscale.rates.track` and :func:`trawl.autoscale.policy.decide`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trawl.api.scrapepool import AutoscalingSpec
from trawl.queue.model import PoolSignals

from .policy import Decision, Observation, ScalerState, decide
from .rates import DEFAULT_TAU_SECONDS, Rates, RateTracker, track


@dataclass(frozen=True, slots=True)
class PoolScalerState:
    """Everything kept between polls of one pool. Losing it (operator restart) is safe: rates are
    measured again and a pending scale-down waits its delay again."""

    rates: RateTracker | None = None
    policy: ScalerState = field(default_factory=ScalerState)


@dataclass(frozen=True, slots=True)
class StepResult:
    decision: Decision
    rates: Rates
    state: PoolScalerState


def observation(
    signals: PoolSignals,
    rates: Rates,
    current_replicas: int,
    *,
    concurrency: int,
    drain_seconds: float,
    rate_limit_ceiling_replicas: int | None = None,
    startup_seconds: float = 15.0,
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
    startup_seconds: float = 15.0,
) -> StepResult:
    """Fold ``signals`` into the rates, decide, and return the decision with the next state."""
    st = state or PoolScalerState()
    tracker = track(st.rates, signals, concurrency=concurrency, tau_seconds=tau_seconds)
    obs = observation(
        signals,
        tracker.rates,
        current_replicas,
        concurrency=concurrency,
        drain_seconds=drain_seconds,
        rate_limit_ceiling_replicas=rate_limit_ceiling_replicas,
        startup_seconds=startup_seconds,
    )
    decision = decide(spec, obs, st.policy)
    return StepResult(decision=decision, rates=tracker.rates, state=PoolScalerState(tracker, decision.state))
