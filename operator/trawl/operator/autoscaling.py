"""Glue between a pool's queue signals and the pure scaling policy in :mod:`trawl.autoscale`.

Keeps, per pool, what the policy needs between calls (the rate tracker, the measured pod start-up
and the policy's state) so the policy itself stays a pure function. Losing it (operator restart) is
safe: rates and start-up are measured again and a pending scale-down waits its delay again. The
decision itself is :func:`trawl.autoscale.step.plan`, the same call the simulator makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.autoscale.backlog import MAX_HOSTS_PER_JOB, domain_backlog, job_hosts
from trawl.autoscale.policy import FOLLOW_UP_SECONDS
from trawl.autoscale.step import PoolScalerState, plan
from trawl.queue.model import PoolSignals

__all__ = ["MAX_HOSTS_PER_JOB", "Autoscalers", "ScaleAdvice", "domain_backlog", "job_hosts"]


@dataclass(frozen=True, slots=True)
class ScaleAdvice:
    desired: int
    reason: str
    action: str = "Hold"
    throughput: float = 0.0
    failure_rate: float = 0.0
    mean_task_seconds: float = 0.0
    failure_guard: bool = False
    limited: bool = False
    limited_reason: str | None = None
    startup_seconds: float | None = None  # measured pod start-up (median of recent pods), None before any
    cordoned: frozenset[str] = frozenset()  # pods whose workers must claim nothing new (policy rule 8)
    write_cordon: bool = False  # the cordon set is or was non-empty: write it to the queue


@dataclass
class Autoscalers:
    """Per-pool autoscaler state, keyed by (namespace, name)."""

    states: dict[tuple[str, str], PoolScalerState] = field(default_factory=dict)
    ready_seen: dict[tuple[str, str], int] = field(default_factory=dict)
    follow_ups: set[tuple[str, str]] = field(default_factory=set)  # pools whose next pass comes early

    def forget(self, key: tuple[str, str]) -> None:
        self.states.pop(key, None)
        self.ready_seen.pop(key, None)
        self.follow_ups.discard(key)

    def wants_startups(self, key: tuple[str, str], ready_replicas: int) -> bool:
        """Whether to list the pool's pods for start-up times on this pass: only when the Deployment's
        ready count changed (a pod became Ready, or the operator restarted), not on every poll."""
        changed = self.ready_seen.get(key) != ready_replicas
        self.ready_seen[key] = ready_replicas
        return changed and ready_replicas > 0

    def poll_seconds(self, key: tuple[str, str], poll_seconds: float) -> float:
        """Seconds from the pool's last pass to its next: ``pollSeconds``, or :data:`FOLLOW_UP_SECONDS`
        where the last decision asked for a follow-up (policy rule 10: a burst still arriving)."""
        return min(poll_seconds, FOLLOW_UP_SECONDS) if key in self.follow_ups else poll_seconds

    def pass_started(self, key: tuple[str, str]) -> None:
        """A pass of the pool begins: an early follow-up, if one was asked for, is this pass (and a pass
        that fails before deciding does not leave the pool polled every second)."""
        self.follow_ups.discard(key)

    def advise(
        self,
        key: tuple[str, str],
        pool: ScrapePoolSpec,
        signals: PoolSignals,
        current: int,
        now: datetime,
        jobs: Iterable[Mapping[str, Any]] = (),
        pod_startups: Iterable[tuple[str, float]] = (),
    ) -> ScaleAdvice:
        previous = self.states.get(key)
        result = plan(pool, signals, current, previous, jobs=jobs, pod_startups=pod_startups)
        self.states[key] = result.state
        if result.decision.follow_up:
            self.follow_ups.add(key)
        was_cordoned = previous is not None and bool(previous.cordoned)
        decision, rates = result.decision, result.rates
        limited_reason = "MaxReplicas" if decision.at_max else ("RateLimited" if decision.rate_limited else None)
        return ScaleAdvice(
            desired=decision.desired,
            reason=decision.reason,
            action=str(decision.action),
            throughput=rates.throughput,
            failure_rate=rates.failure_rate or 0.0,
            mean_task_seconds=rates.mean_service_seconds or 0.0,
            failure_guard=decision.failure_guard,
            limited=decision.limited,
            limited_reason=limited_reason,
            startup_seconds=result.state.startup.measured,
            cordoned=result.cordoned,
            write_cordon=bool(result.cordoned) or was_cordoned,
        )
