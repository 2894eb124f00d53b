"""Pod start-up, measured: how long the pool's own pods take from creation to Ready.

The policy discounts pods that are not serving yet by their start-up time (rule 1 of
:mod:`trawl.autoscale.policy`). The controller does not know it in advance: it measures each of its
pods once, from ``metadata.creationTimestamp`` to the ``Ready`` condition's ``lastTransitionTime``,
and uses the median of the last :data:`KEEP` pods. Until a pod has been measured it assumes
:data:`DEFAULT_STARTUP_SECONDS`. The simulator feeds the same estimator with its pods' creation and
ready times, so it knows exactly what the controller knows.

Pure: :func:`record` returns a new :class:`StartupEstimate`; :func:`pod_startup` reads one pod.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Assumed before any pod of the pool was seen Ready (an image pull on a cold node is often longer,
# a warm node's start-up shorter; the first measurement replaces it).
DEFAULT_STARTUP_SECONDS = 15.0
# Pods remembered: enough for a stable median, few enough to follow a change of node or image.
KEEP = 10
# A pod Ready this long after creation was not starting up (readiness flipped later, or it waited
# for a node): not a start-up sample.
MAX_SAMPLE_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class StartupEstimate:
    """Start-up samples of the pool's pods, newest last, keyed by pod uid (each pod counted once)."""

    samples: tuple[tuple[str, float], ...] = ()

    @property
    def measured(self) -> float | None:
        """Median of the remembered pods, or None before the first."""
        if not self.samples:
            return None
        return float(statistics.median(s for _, s in self.samples))

    @property
    def seconds(self) -> float:
        """What the policy uses: the measurement, else the default."""
        m = self.measured
        return DEFAULT_STARTUP_SECONDS if m is None else m


def record(estimate: StartupEstimate | None, samples: Iterable[tuple[str, float]]) -> StartupEstimate:
    """Add ``(pod uid, seconds)`` samples not seen before; keep the newest :data:`KEEP`."""
    est = estimate or StartupEstimate()
    known = {uid for uid, _ in est.samples}
    new = [(uid, s) for uid, s in samples if uid not in known and 0 <= s <= MAX_SAMPLE_SECONDS]
    if not new:
        return est
    return StartupEstimate((*est.samples, *new)[-KEEP:])


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def pod_startup(pod: Mapping[str, Any]) -> tuple[str, float] | None:
    """(uid, creation → Ready seconds) of a Ready pod, or None when it is not Ready (yet)."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    created = _time(meta.get("creationTimestamp") or meta.get("creation_timestamp"))
    if not uid or created is None:
        return None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") != "Ready" or cond.get("status") != "True":
            continue
        ready = _time(cond.get("lastTransitionTime") or cond.get("last_transition_time"))
        if ready is None:
            return None
        return str(uid), max(0.0, (ready - created).total_seconds())
    return None
