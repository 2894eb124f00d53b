"""Queue-aware autoscaling: a pure policy, rate estimation from queue snapshots, pod start-up, pass timing.

The controller (:mod:`trawl.operator.pool.scaling`) calls :func:`trawl.autoscale.step.plan` once per poll
and keeps the returned :class:`PoolScalerState`; the benchmark's simulator (``bench/poolsim``) makes the
same call.
"""

from .policy import Action, Decision, Observation, ScalerState, decide
from .rates import DomainBacklog, Rates, RateTracker, rate_limit_ceiling, track, worker_counts
from .step import PoolScalerState, StepResult, observation, step

__all__ = [
    "Action",
    "Decision",
    "DomainBacklog",
    "Observation",
    "PoolScalerState",
    "RateTracker",
    "Rates",
    "ScalerState",
    "StepResult",
    "decide",
    "observation",
    "rate_limit_ceiling",
    "step",
    "track",
    "worker_counts",
]
