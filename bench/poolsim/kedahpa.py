"""A model of KEDA's Redis list scaler driving a HorizontalPodAutoscaler, with their defaults.

What it reproduces (KEDA 2.x, Kubernetes HPA v2 controller, ``pkg/controller/podautoscaler``):

- KEDA polls the scaler every ``pollingInterval`` (30 s). Only KEDA moves a workload between zero and
  one: active (list length > ``activationListLength``, default 0) at zero → 1 replica; inactive for
  ``cooldownPeriod`` (300 s) since the last active poll with ``minReplicaCount`` 0 → 0 replicas.
- Between 1 and max the HPA decides, every ``--horizontal-pod-autoscaler-sync-period`` (15 s), on the
  external metric the KEDA metrics server reads live from Redis at each HPA query (the default,
  ``useCachedMetrics: false``): the list length, ``AverageValue`` target ``listLength`` (5).
  In-flight tasks are not in the list, so they are not counted.
- ``GetExternalPerPodMetricReplicas``: ratio = metric / (target * replicas); within the tolerance
  (0.1) keep the replicas, else ``ceil(metric / target)``.
- ``stabilizeRecommendationWithBehaviors``: scale-down stabilization window 300 s (the highest
  recommendation of the window), scale-up window 0.
- ``convertDesiredReplicasWithBehaviorRate`` with the default policies: up = max(100 %, 4 pods) per
  15 s, down = 100 % per 15 s, both counted from the replicas at the start of the period.
- HPA bounds: ``minReplicas = max(minReplicaCount, 1)``, ``maxReplicas = maxReplicaCount``; the HPA
  does nothing while the workload is at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class KedaHpaConfig:
    list_length: float = 5.0
    activation_list_length: float = 0.0
    polling_interval: float = 30.0
    cooldown_period: float = 300.0
    min_replica_count: int = 0
    max_replica_count: int = 100
    hpa_sync_period: float = 15.0
    tolerance: float = 0.1
    scale_up_stabilization: float = 0.0
    scale_down_stabilization: float = 300.0
    scale_up_percent: float = 100.0
    scale_up_pods: int = 4
    scale_up_period: float = 15.0
    scale_down_percent: float = 100.0
    scale_down_period: float = 15.0


@dataclass
class KedaHpaModel:
    """Call :meth:`keda_poll` every ``polling_interval`` and :meth:`hpa_sync` every ``hpa_sync_period``.

    Each returns the new replica count, or None when it leaves the workload alone.
    """

    config: KedaHpaConfig = field(default_factory=KedaHpaConfig)
    last_active: float | None = None
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    scale_up_events: list[tuple[float, int]] = field(default_factory=list)
    scale_down_events: list[tuple[float, int]] = field(default_factory=list)

    def keda_poll(self, now: float, list_length: int, current: int) -> int | None:
        c = self.config
        if self.last_active is None:
            self.last_active = now
        active = list_length > c.activation_list_length
        if active:
            self.last_active = now
            if current == 0:
                return max(c.min_replica_count, 1)
            return None
        if current > 0 and c.min_replica_count == 0 and now - self.last_active >= c.cooldown_period:
            return 0
        return None

    def hpa_sync(self, now: float, list_length: int, current: int) -> int | None:
        c = self.config
        if current == 0:
            return None  # ScalingDisabled: the HPA does not act on a workload at zero
        hpa_min = max(c.min_replica_count, 1)
        hpa_max = c.max_replica_count
        ratio = list_length / (c.list_length * current)
        proposed = current if abs(1.0 - ratio) <= c.tolerance else math.ceil(list_length / c.list_length)
        stabilized = self._stabilize(now, proposed, current)
        desired = self._rate_limit(now, stabilized, current, hpa_min, hpa_max)
        if desired == current:
            return None
        if desired > current:
            self.scale_up_events.append((now, desired - current))
        else:
            self.scale_down_events.append((now, current - desired))
        return desired

    def _stabilize(self, now: float, proposed: int, current: int) -> int:
        c = self.config
        up = down = proposed
        up_cutoff = now - c.scale_up_stabilization
        down_cutoff = now - c.scale_down_stabilization
        for t, rec in self.recommendations:
            if t > up_cutoff:
                up = min(up, rec)
            if t > down_cutoff:
                down = max(down, rec)
        longest = max(c.scale_up_stabilization, c.scale_down_stabilization)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - longest]
        self.recommendations.append((now, proposed))
        recommendation = current
        if recommendation < up:
            recommendation = up
        if recommendation > down:
            recommendation = down
        return recommendation

    @staticmethod
    def _changed_in(events: list[tuple[float, int]], now: float, period: float) -> int:
        return sum(d for t, d in events if t > now - period)

    def _rate_limit(self, now: float, desired: int, current: int, hpa_min: int, hpa_max: int) -> int:
        c = self.config
        if desired > current:
            added = self._changed_in(self.scale_up_events, now, c.scale_up_period)
            start = current - added
            limit = max(start + c.scale_up_pods, math.ceil(start * (1 + c.scale_up_percent / 100)))
            limit = max(limit, current)
            return min(desired, min(hpa_max, limit))
        if desired < current:
            deleted = self._changed_in(self.scale_down_events, now, c.scale_down_period)
            start = current + deleted
            limit = int(start * (1 - c.scale_down_percent / 100))
            limit = min(limit, current)
            return max(desired, max(hpa_min, limit))
        return max(hpa_min, min(hpa_max, desired))
