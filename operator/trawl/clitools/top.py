"""``trawl top``: pool samples from the ScrapePool statuses and their history over the last minutes.

The operator refreshes each pool's ``status.queue`` (backlog, in flight, throughput, failure rate)
and replicas every poll interval, so ``top`` needs only read access to the API, not to Redis (which
is rarely reachable from a laptop). Each refresh appends a sample; the sparklines show the window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .cluster import Cluster

SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class TenantSample:
    """One tenant's use of a pool with spec.tenancy, from the pool's status.tenants."""

    tenant: str
    weight: int
    in_flight: int
    pages_today: int
    claimed_total: int
    throttled: str  # the quota's figure while one holds the tenant back, else ""
    browser_seconds_today: float = 0.0  # browser page time of its jobs this UTC day (browserSecondsPerDay)


def sample_tenants(status: dict[str, Any]) -> tuple[TenantSample, ...]:
    return tuple(
        TenantSample(
            tenant=str(row.get("tenant") or ""),
            weight=int(row.get("weight") or 1),
            in_flight=int(row.get("inFlight") or 0),
            pages_today=int(row.get("pagesToday") or 0),
            claimed_total=int(row.get("claimedTotal") or 0),
            throttled=str(row.get("throttledMessage") or row.get("throttled") or "") if row.get("throttled") else "",
            browser_seconds_today=float(row.get("browserSecondsToday") or 0),
        )
        for row in status.get("tenants") or []
        if isinstance(row, dict)
    )


@dataclass(frozen=True)
class PoolSample:
    time: float
    namespace: str
    name: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    throughput: float
    failure_rate: float
    replicas: int
    desired: int
    ready_replicas: int
    reason: str
    conditions: dict[str, str]
    tenants: tuple[TenantSample, ...] = ()

    @property
    def backlog(self) -> int:
        return self.ready + self.delayed


def sample_pool(obj: dict[str, Any], now: float) -> PoolSample:
    status = obj.get("status") or {}
    queue = status.get("queue") or {}
    conditions = {
        c.get("type", ""): c.get("reason", "") for c in status.get("conditions") or [] if c.get("status") == "True"
    }
    return PoolSample(
        time=now,
        namespace=obj["metadata"].get("namespace", ""),
        name=obj["metadata"]["name"],
        ready=int(queue.get("ready") or 0),
        delayed=int(queue.get("delayed") or 0),
        in_flight=int(queue.get("inFlight") or 0),
        dead=int(queue.get("dead") or 0),
        throughput=float(queue.get("throughputPerSecond") or 0.0),
        failure_rate=float(queue.get("failureRate") or 0.0),
        replicas=int(status.get("replicas") or 0),
        desired=int(status.get("desiredReplicas") or 0),
        ready_replicas=int(status.get("readyReplicas") or 0),
        reason=str(status.get("scalingReason") or (status.get("lastScale") or {}).get("reason") or ""),
        conditions=conditions,
        tenants=sample_tenants(status),
    )


@dataclass
class History:
    """Samples per pool within ``window`` seconds."""

    window: float = 300.0
    pools: dict[tuple[str, str], deque[PoolSample]] = field(default_factory=dict)

    def add(self, samples: Sequence[PoolSample], now: float) -> None:
        present = {(s.namespace, s.name) for s in samples}
        for key in list(self.pools):
            if key not in present:
                del self.pools[key]
        for s in samples:
            series = self.pools.setdefault((s.namespace, s.name), deque())
            series.append(s)
            while series and series[0].time < now - self.window:
                series.popleft()

    def latest(self) -> list[deque[PoolSample]]:
        return [self.pools[k] for k in sorted(self.pools)]


def poll(cluster: Cluster, history: History, now: float, *, all_namespaces: bool = False) -> list[PoolSample]:
    samples = [sample_pool(obj, now) for obj in cluster.list("ScrapePool", all_namespaces=all_namespaces)]
    history.add(samples, now)
    return samples


def sparkline(values: Sequence[float], width: int = 20, top: float | None = None) -> str:
    """Unicode bars of the last ``width`` values, scaled to ``top`` (default: their maximum); zero is the lowest bar."""
    if not values:
        return ""
    points = list(values)[-width:]
    high = top if top is not None else max(points)
    if high <= 0:
        return SPARK[0] * len(points)
    out = []
    for v in points:
        level = 0 if v <= 0 else 1 + round((min(v, high) / high) * (len(SPARK) - 2))
        out.append(SPARK[min(level, len(SPARK) - 1)])
    return "".join(out)
