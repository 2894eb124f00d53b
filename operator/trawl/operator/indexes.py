"""What the operator's in-memory indexes hold per object (pure; kopf calls these for every event).

An index function that raises makes kopf drop the object from the index, and everything that
consults the index then believes the object does not exist (a pool with a running job could be
deleted). So these read the raw spec defensively and never raise on user input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trawl.operator.job.status import TERMINAL
from trawl.operator.pool.scaling import job_hosts


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def pool_index_entry(name: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """A job as its pool sees it: phase, and for the autoscaler's ceiling where waiting work goes."""
    counts = status.get("counts") or {}
    phase = status.get("phase")
    active = phase not in TERMINAL
    politeness = spec.get("politeness")
    return {
        "name": name,
        "phase": phase,
        "waiting": _int(counts.get("pending")) + _int(counts.get("retrying")) if active else 0,
        "hosts": job_hosts(spec) if active else None,
        "politeness": dict(politeness) if active and isinstance(politeness, Mapping) else None,
    }


def controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (its ownerReference with controller: true), if any."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            uid = ref.get("uid")
            return str(uid) if uid else None
    return None
