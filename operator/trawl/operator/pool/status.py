"""A ScrapePool's status from what one pass found (pure, no I/O).

The reconciler observes (the Deployment, the queue's signals, the autoscaler's advice, Redis's
memory); this module turns that into the wire form: the conditions (through the builder in
operator/conditions.py), the last observations kept while a pass is stalled, and which findings
deserve an Event.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from trawl.api.common import format_time
from trawl.api.naming import deployment_name, pool_selector
from trawl.api.scrapepool import MAX_TENANTS_ON_STATUS, ScrapePoolSpec
from trawl.operator.conditions import (
    Cond,
    ConditionType,
    healthy,
    merge_conditions,
    progressing,
    redis_data_lost,
    stalled,
    warn_if_new,
)
from trawl.operator.events import Transition
from trawl.operator.problems import Problem
from trawl.queue.model import PoolSignals, TenantUsage
from trawl.redisconn.memory import EVICTION_POLICY, RedisMemory

from .scaling import ScaleAdvice

# What a stalled pass did not observe again: the status keeps what the last pass that could saw.
OBSERVATIONS = (
    "queue",
    "lastScale",
    "scalingReason",
    "desiredReplicas",
    "replicas",
    "readyReplicas",
    "podStartupSeconds",
    "queueEpoch",
    "tenants",
    "proxies",
)


@dataclass
class PoolOutcome:
    status: dict[str, Any]
    events: list[Transition] = field(default_factory=list)
    redis_memory: RedisMemory | None = None  # what this pass read of its Redis (for the gauges), if it did


def pass_status(name: str, generation: int) -> dict[str, Any]:
    """What every pass's status starts with: the generation it judged, the Deployment and its selector."""
    return {
        "observedGeneration": generation,
        "deployment": deployment_name(name),
        "selector": ",".join(f"{k}={v}" for k, v in pool_selector(name).items()),
    }


def signals_status(signals: PoolSignals, advice: ScaleAdvice | None) -> dict[str, Any]:
    return {
        "ready": signals.ready,
        "held": signals.held,  # ready tasks a tenant's quota holds back (pools with spec.tenancy only)
        "delayed": signals.delayed,
        "inFlight": signals.in_flight,
        "dead": signals.dead,
        "throughputPerSecond": round(advice.throughput, 2) if advice else 0.0,
        "failureRate": round(min(max(advice.failure_rate, 0.0), 1.0), 3) if advice else 0.0,
        "meanTaskSeconds": round(advice.mean_task_seconds, 3) if advice else 0.0,
    }


def tenants_status(usage: list[TenantUsage], over_browser_quota: Set[str] = frozenset()) -> list[dict[str, Any]]:
    """status.tenants: each tenant's use of the pool, the throttled first (what an operator looks for), then by
    name; at most MAX_TENANTS_ON_STATUS (metrics and ``trawl top`` read the queue for all of them).

    ``over_browser_quota``: tenants whose browser time today reached their browserSecondsPerDay. They come
    first too: their jobs learn the day's sum from this list (trawl.operator.indexes), so a pool with more
    tenants than the list holds must never leave them out."""
    ordered = sorted(usage, key=lambda u: (u.throttled is None and u.tenant not in over_browser_quota, u.tenant))[
        :MAX_TENANTS_ON_STATUS
    ]
    rows: list[dict[str, Any]] = []
    for u in ordered:
        row: dict[str, Any] = {
            "tenant": u.tenant[:253],
            "weight": max(1, u.weight),
            "inFlight": max(0, u.in_flight),
            "claimedTotal": max(0, u.claimed_total),
            "pagesToday": max(0, u.pages_today),
            "browserSecondsToday": round(max(0.0, u.browser_seconds_today), 3),  # the queue counts milliseconds
            "queued": max(0, u.queued),
        }
        if u.queue_full_message:
            row["queueFullMessage"] = u.queue_full_message[:1024]
        if u.throttled is not None:
            row["throttled"] = u.throttled[:64]
            row["throttledMessage"] = u.throttled_message[:1024]
            if u.throttled_since is not None:
                row["throttledSince"] = format_time(datetime.fromtimestamp(u.throttled_since, UTC))
        rows.append(row)
    return rows


def pool_data_lost(prev: Mapping[str, Any], epoch: str) -> str | None:
    """What to tell when the pool's Redis answers with another data epoch than the pool last saw."""
    seen = prev.get("queueEpoch")
    if seen is None or seen == epoch:
        return None
    return (
        "the pool's Redis lost its data (a restart without persistence, a failover to a replica that had not "
        "caught up, or a flush): its queue, counters and RedisStream results are gone; each affected ScrapeJob "
        "says what that means for it (condition DataLost)"
    )


def failed_pool(
    name: str, status: Mapping[str, Any], generation: int, now: datetime, reason: str, msg: str
) -> PoolOutcome:
    """The status of a pass that failed unexpectedly: Stalled with the error, last observations kept."""
    return finish_pass(pass_status(name, generation), dict(status), generation, now, [], problem=Problem(reason, msg))


def finish_pass(
    new: dict[str, Any],
    prev: dict[str, Any],
    generation: int,
    now: datetime,
    events: list[Transition],
    *,
    problem: Problem | None = None,
    advice: ScaleAdvice | None = None,
    spec: ScrapePoolSpec | None = None,
    data_lost: str | None = None,
    idle: bool = False,
    redis_warning: str | None = None,
) -> PoolOutcome:
    """The pass's status ``new`` completed with its conditions; ``events`` with the Warnings for what is new.

    ``problem``: the pass is stalled (its observations so far, the rest kept from ``prev``). ``advice``: the
    autoscaler's answer, None when it did not run. ``spec``: None when the spec did not validate. ``idle``: no
    work in the queue. ``redis_warning``: Redis evicts keys (Degraded)."""
    previous = prev.get("conditions")
    conds: list[Cond] = []
    if data_lost is not None:  # sticky: merge_conditions keeps it on later passes
        conds.append(redis_data_lost(data_lost))
    if problem is not None:
        conds += stalled(*problem)
        events += warn_if_new(previous, ConditionType.STALLED, *problem)
        for key in OBSERVATIONS:
            if key not in new and key in prev:
                new[key] = prev[key]
    else:
        conds += _workers(int(new.get("desiredReplicas", 0)), int(new.get("readyReplicas", 0)))
    # An evicting Redis can drop the pool's data without an error: Degraded until its policy changes.
    evicting = Cond(ConditionType.DEGRADED, True, EVICTION_POLICY, redis_warning) if redis_warning is not None else None
    if evicting is not None:
        events += warn_if_new(previous, ConditionType.DEGRADED, EVICTION_POLICY, evicting.message)
    if advice is not None:
        conds += _autoscaled(advice, evicting, idle)
    elif problem is None and spec is not None:
        conds.append(evicting or Cond(ConditionType.DEGRADED, False, "Healthy"))
        conds.append(Cond(ConditionType.SCALING_LIMITED, False, "AutoscalingDisabled"))
    new["conditions"] = merge_conditions(previous, conds, generation=generation, now=now)
    return PoolOutcome(new, events)


def _workers(desired: int, ready: int) -> list[Cond]:
    """Ready while workers serve; Reconciling while fewer are ready than desired (Scaling)."""
    msg = f"{ready}/{desired} workers ready"
    if ready < desired:
        return list(progressing("Scaling", msg, ready=True))
    return list(healthy("WorkersAvailable", msg))


def _autoscaled(advice: ScaleAdvice, evicting: Cond | None, idle: bool) -> list[Cond]:
    """Degraded and ScalingLimited as the autoscaler sees the pool."""
    # The failure guard remembers recent failures; with no work left there is nothing degraded
    # to report (a GitOps tool would otherwise show an idle pool Degraded until the next success).
    if evicting is not None:
        degraded = evicting
    elif advice.failure_guard and not idle:
        degraded = Cond(ConditionType.DEGRADED, True, "FailureGuard", advice.reason)
    else:
        degraded = Cond(ConditionType.DEGRADED, False, "Idle" if idle else "Healthy")
    limited = (
        Cond(ConditionType.SCALING_LIMITED, True, advice.limited_reason or "Limited", advice.reason)
        if advice.limited
        else Cond(ConditionType.SCALING_LIMITED, False, "WithinLimits")
    )
    return [degraded, limited]
