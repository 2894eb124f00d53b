"""Conditions in the metav1.Condition shape: the one builder of every kind's, and the list kept by type.

Every kind reports the triple kstatus, Argo CD and Flux read: Ready, Stalled and Reconciling. Its
combinations are made here only (``stalled``, ``healthy``, ``at_rest``, ``progressing``), so a job, a pool
and a cron that cannot make progress, or that wait because they were asked to, say so the same way, and
the one rule for when that deserves a Warning Event (``warn_if_new``) sits beside them. The conditions
only one kind has (Complete, Degraded, ...) are built by that kind with the same typed ``Cond``.

lastTransitionTime changes only when a condition's status flips: kstatus, Argo CD and humans
read it as "since when", so rewriting it on every reconcile would be a lie (and a needless write).
The list is written in the wire form (``merge_conditions``), each entry in the shape of the API's
``trawl.api.common.Condition``; previous conditions are read as the API server stored them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from trawl.api.common import ConditionStatus, format_time

from .events import Transition
from .problems import Problem

# Reconciling's and Stalled's reason when nothing is in the way.
RECONCILED = "Reconciled"


class ConditionType(StrEnum):
    """Every condition type the operator writes."""

    READY = "Ready"
    STALLED = "Stalled"
    RECONCILING = "Reconciling"
    COMPLETE = "Complete"  # ScrapeJob
    FAILED = "Failed"  # ScrapeJob
    SUSPENDED = "Suspended"  # ScrapeJob
    DEAD_LETTERED = "DeadLettered"  # ScrapeJob
    DATA_LOST = "DataLost"  # ScrapeJob, ScrapePool
    DEGRADED = "Degraded"  # ScrapePool
    SCALING_LIMITED = "ScalingLimited"  # ScrapePool


@dataclass(frozen=True, slots=True)
class Cond:
    """A condition a pass wants; ``merge_conditions`` gives it its transition time and generation."""

    type: ConditionType
    status: bool | None  # None means Unknown
    reason: str
    message: str = ""

    @property
    def condition_status(self) -> ConditionStatus:
        if self.status is None:
            return ConditionStatus.UNKNOWN
        return ConditionStatus.TRUE if self.status else ConditionStatus.FALSE


class Health(NamedTuple):
    """Ready, Stalled and Reconciling: what kstatus, Argo CD and Flux read of every kind, in that order."""

    ready: Cond
    stalled: Cond
    reconciling: Cond


def stalled(reason: str, message: str) -> Health:
    """Cannot make progress (kstatus and Flux read a Stalled object as failed): Ready=False and Stalled=True
    with the reason and message, Reconciling=False (nothing happens until the cause is fixed)."""
    return Health(
        Cond(ConditionType.READY, False, reason, message),
        Cond(ConditionType.STALLED, True, reason, message),
        Cond(ConditionType.RECONCILING, False, reason, ""),
    )


def healthy(reason: str, message: str, *, settled: str = RECONCILED, stalled_by: Problem | None = None) -> Health:
    """Ready=True with the reason and message, nothing in progress (Reconciling=False, reason ``settled``).

    ``stalled_by``: a problem this pass met that does not take readiness away (a finished job whose pool or
    Redis is gone: its result stands, the operator only cannot look), shown as Stalled=True."""
    return Health(
        Cond(ConditionType.READY, True, reason, message),
        _stalled_or_not(stalled_by),
        Cond(ConditionType.RECONCILING, False, settled, ""),
    )


def at_rest(reason: str, message: str) -> Health:
    """Waiting because its spec asks it to (a suspended job or schedule): at its desired state, so Ready=True
    with ``reason`` (e.g. Suspended) and nothing in progress, nothing in the way.

    kstatus (Flux's health) reads Reconciling=True as InProgress and, failing Reconciling and Stalled, Ready=False
    as InProgress too: either would leave a Flux ``wait`` on a suspended object running until it times out, for
    a state no controller will ever leave on its own. Ready=True reads as Current. Waiting that ends without
    anyone acting (a quota's window, a free worker) is ``progressing`` instead."""
    return healthy(reason, message, settled=reason)


def progressing(reason: str, message: str, *, ready: bool = False) -> Health:
    """Work under way (Reconciling=True with the reason and message), nothing in the way (Stalled=False).
    ``ready``: the object already serves while it changes (a pool whose workers are scaling)."""
    return Health(
        Cond(ConditionType.READY, ready, reason, message),
        _stalled_or_not(None),
        Cond(ConditionType.RECONCILING, True, reason, message),
    )


def _stalled_or_not(problem: Problem | None) -> Cond:
    if problem is None:
        return Cond(ConditionType.STALLED, False, RECONCILED, "")
    return Cond(ConditionType.STALLED, True, problem.reason, problem.message)


def redis_data_lost(message: str) -> Cond:
    """Redis lost the object's data. Sticky: no later pass sets DataLost, so ``merge_conditions`` keeps it."""
    return Cond(ConditionType.DATA_LOST, True, "RedisDataLost", message)


def warn_if_new(
    previous: list[dict[str, Any]] | None, type_: ConditionType, reason: str, message: str
) -> list[Transition]:
    """A Warning Event (reason and message as given) when condition ``type_`` turns True with ``reason`` now:
    it was absent, not True, or True for another reason. One Event per new reason, none while it lasts."""
    before = get_condition(previous, type_)
    if before is not None and before.get("status") == ConditionStatus.TRUE and before.get("reason") == reason:
        return []
    return [Transition("Warning", reason, message)]


def merge_conditions(
    current: list[dict[str, Any]] | None,
    wanted: list[Cond],
    *,
    generation: int,
    now: datetime,
) -> list[dict[str, Any]]:
    """The new condition list: ``wanted`` types set, other existing types kept, in a stable order."""
    by_type = {c.get("type"): c for c in current or [] if isinstance(c, dict)}
    out: list[dict[str, Any]] = []
    wanted_types = set()
    for cond in wanted:
        wanted_types.add(cond.type.value)
        old = by_type.get(cond.type.value)
        status = cond.condition_status.value
        changed = old is None or old.get("status") != status
        out.append(
            {
                "type": cond.type.value,
                "status": status,
                "reason": cond.reason,
                "message": cond.message[:32768],
                "lastTransitionTime": (
                    format_time(now) if changed or old is None else old.get("lastTransitionTime", format_time(now))
                ),
                "observedGeneration": generation,
            }
        )
    out.extend(c for t, c in by_type.items() if t not in wanted_types)
    return out


def get_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    """The condition of that type as stored (``type_`` a ConditionType or the type's name)."""
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(conditions: list[dict[str, Any]] | None, type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == ConditionStatus.TRUE
