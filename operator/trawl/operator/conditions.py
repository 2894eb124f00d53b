"""Conditions in the metav1.Condition shape, kept as a list keyed by type.

lastTransitionTime changes only when a condition's status flips: kstatus, Argo CD and humans
read it as "since when", so rewriting it on every reconcile would be a lie (and a needless write).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trawl.api.common import format_time


@dataclass(frozen=True, slots=True)
class Cond:
    type: str
    status: bool | None  # None means Unknown
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


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
        wanted_types.add(cond.type)
        old = by_type.get(cond.type)
        changed = old is None or old.get("status") != cond.status_text
        out.append(
            {
                "type": cond.type,
                "status": cond.status_text,
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
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(conditions: list[dict[str, Any]] | None, type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"
