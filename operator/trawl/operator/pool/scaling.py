"""Glue between a pool's queue signals and the pure scaling policy in :mod:`trawl.autoscale`.

Keeps, per pool, what the policy needs between calls (the rate tracker, the measured pod start-up
and the policy's state) so the policy itself stays a pure function. Losing it (operator restart) is
safe: rates and start-up are measured again and a pending scale-down waits its delay again. The
decision itself is :func:`trawl.autoscale.step.plan`, the same call the simulator makes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.autoscale.backlog import MAX_HOSTS_PER_JOB, domain_backlog, job_hosts
from trawl.autoscale.policy import Action
from trawl.autoscale.schedule import TICK_SECONDS, PassSchedule
from trawl.autoscale.step import PoolScalerState, StepResult, plan
from trawl.queue.model import PoolSignals

# Named as before the move to operator/pool/: operators may filter on it (README, "the operator's log").
log = logging.getLogger("trawl.operator.autoscaling")

# The burst check between passes reads one counter; slower than this, the tick leaves it to the next poll.
BURST_CHECK_TIMEOUT_SECONDS = TICK_SECONDS / 2

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
    # When each pool's next pass comes (regular, follow-up or burst: trawl.autoscale.schedule).
    schedules: dict[tuple[str, str], PassSchedule] = field(default_factory=dict)
    # The pool's enqueue counter, as its last pass found the queue: read on ticks between passes.
    enqueue_counters: dict[tuple[str, str], Callable[[], Awaitable[int]]] = field(default_factory=dict)
    # The last pass's action, so a repeated one is logged at DEBUG only.
    actions: dict[tuple[str, str], Action] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic

    def forget(self, key: tuple[str, str]) -> None:
        self.states.pop(key, None)
        self.ready_seen.pop(key, None)
        self.schedules.pop(key, None)
        self.enqueue_counters.pop(key, None)
        self.actions.pop(key, None)

    def wants_startups(self, key: tuple[str, str], ready_replicas: int) -> bool:
        """Whether to list the pool's pods for start-up times on this pass: only when the Deployment's
        ready count changed (a pod became Ready, or the operator restarted), not on every poll."""
        changed = self.ready_seen.get(key) != ready_replicas
        self.ready_seen[key] = ready_replicas
        return changed and ready_replicas > 0

    def pass_due(self, key: tuple[str, str], poll_seconds: float) -> bool:
        """Whether the pool's scheduled pass is due: ``poll_seconds`` after the last one, or
        FOLLOW_UP_SECONDS after a decision that asked for a follow-up (policy rule 10)."""
        return self.schedules.get(key, PassSchedule()).regular_due(self.clock(), poll_seconds)

    async def burst_due(self, key: tuple[str, str]) -> bool:
        """Whether a burst brings the pool's pass forward (rule 11): one read of its enqueue counter. A
        failed or slow read is no burst; the next regular pass reports what is wrong with Redis."""
        schedule, counter = self.schedules.get(key), self.enqueue_counters.get(key)
        if schedule is None or counter is None or schedule.baseline_at is None:
            return False
        try:
            enqueued = await asyncio.wait_for(counter(), timeout=BURST_CHECK_TIMEOUT_SECONDS)
        except Exception as exc:
            log.debug("pool %s/%s: burst check skipped: %s", *key, exc)
            return False
        return schedule.burst_due(self.clock(), enqueued)

    def pass_started(self, key: tuple[str, str], *, scheduled: bool = True) -> None:
        """A pass of the pool begins (:meth:`PassSchedule.started`)."""
        self.schedules[key] = self.schedules.get(key, PassSchedule()).started(self.clock(), scheduled=scheduled)
        self.enqueue_counters.pop(key, None)

    def advise(
        self,
        key: tuple[str, str],
        pool: ScrapePoolSpec,
        signals: PoolSignals,
        current: int,
        now: datetime,
        jobs: Iterable[Mapping[str, Any]] = (),
        pod_startups: Iterable[tuple[str, float]] = (),
        enqueue_counter: Callable[[], Awaitable[int]] | None = None,
    ) -> ScaleAdvice:
        """Decide for one pass. ``enqueue_counter`` (the pool queue's ``enqueued_total``) is read on the
        ticks until the next pass, to bring it forward for a burst."""
        previous = self.states.get(key)
        result = plan(pool, signals, current, previous, jobs=jobs, pod_startups=pod_startups)
        self.states[key] = result.state
        self.schedules[key] = self.schedules.get(key, PassSchedule()).decided(
            self.clock(),
            follow_up=result.decision.follow_up,
            enqueued=signals.enqueued_total if enqueue_counter is not None else None,
            arrival_rate=result.rates.arrival_rate,
            concurrency=pool.worker.concurrency,
        )
        if enqueue_counter is not None:
            self.enqueue_counters[key] = enqueue_counter
        was_cordoned = previous is not None and bool(previous.cordoned)
        decision, rates = result.decision, result.rates
        _log_decision(key, result, previous, self.actions.get(key))
        self.actions[key] = result.decision.action
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


def _log_decision(
    key: tuple[str, str], result: StepResult, previous: PoolScalerState | None, last_action: Action | None
) -> None:
    """One line per pass: at INFO when something changes (replicas, the action or the cordon set), else
    at DEBUG, with the inputs needed to read the decision (per-worker loads, arrivals, start-up)."""
    decision, obs = result.decision, result.observation
    changed = (
        decision.desired != decision.current
        or decision.action != last_action
        or (previous.cordoned if previous is not None else frozenset()) != result.cordoned
    )
    level = logging.INFO if changed else logging.DEBUG
    if not log.isEnabledFor(level):  # the repeated decision at the default INFO: no sorting for nothing
        return
    loads = sorted(obs.worker_loads, reverse=True) if obs is not None else []
    log.log(
        level,
        "pool %s/%s: %s %d→%d, cordoned %s, loads %s, %.2f tasks/s arriving, start-up %.1fs: %s",
        *key,
        decision.action,
        decision.current,
        decision.desired,
        sorted(result.cordoned),
        loads,
        result.rates.arrival_rate,
        obs.startup_seconds if obs is not None else float("nan"),
        decision.reason,
    )
