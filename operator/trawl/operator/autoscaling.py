"""Glue between a pool's queue signals and the pure scaling policy in :mod:`trawl.autoscale`.

Keeps, per pool, what the policy needs between calls (the previous snapshot for rates, the
policy's own state) so the policy itself stays a pure function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trawl.api.scrapepool import AutoscalingSpec
from trawl.queue.model import PoolSignals


@dataclass(frozen=True, slots=True)
class ScaleAdvice:
    desired: int
    reason: str
    throughput: float = 0.0
    failure_rate: float = 0.0
    mean_task_seconds: float = 0.0
    failure_guard: bool = False
    limited: bool = False
    limited_reason: str | None = None


@dataclass
class Autoscalers:
    """Per-pool autoscaler state, keyed by (namespace, name)."""

    states: dict[tuple[str, str], Any] = field(default_factory=dict)

    def forget(self, key: tuple[str, str]) -> None:
        self.states.pop(key, None)

    def advise(
        self, key: tuple[str, str], spec: AutoscalingSpec, signals: PoolSignals, current: int, now: datetime
    ) -> ScaleAdvice:
        # Placeholder until trawl.autoscale lands: enough workers for any work, min otherwise.
        work = signals.ready + signals.delayed_due_soon + signals.in_flight
        desired = max(spec.min_replicas, min(spec.max_replicas, 1 if work else 0))
        return ScaleAdvice(desired=desired, reason=f"backlog {work}")
