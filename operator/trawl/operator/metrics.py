"""Prometheus metrics of the operator, served on --metrics-port at /metrics."""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from trawl.api.common import parse_time
from trawl.redisconn.memory import RedisMemory

STATUS_PATCHES = Counter("trawl_operator_status_patches_total", "Status patches written, by kind.", ["kind"])
RECONCILE_SECONDS = Histogram(
    "trawl_operator_reconcile_seconds",
    "Time of one reconcile pass, by kind.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SCALING_DECISIONS = Counter(
    "trawl_operator_scaling_decisions_total", "Replica changes made by the autoscaler.", ["pool", "direction"]
)
IS_LEADER = Gauge("trawl_operator_leader", "1 while this replica holds the leader Lease (or runs without election).")
RECONCILE_ERRORS = Counter(
    "trawl_operator_reconcile_errors_total",
    "Reconcile passes that failed unexpectedly (each shown on the object as Stalled), by kind and reason.",
    ["kind", "reason"],
)
REDIS_ERRORS = Counter("trawl_operator_redis_errors_total", "Redis failures seen while reconciling.", ["kind"])

_job_phases: dict[str, str] = {}


def record_job_phase(uid: str, phase: str | None) -> None:
    if phase is None:
        _job_phases.pop(uid, None)
    else:
        _job_phases[uid] = phase


class _PhaseCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "trawl_operator_jobs", "ScrapeJobs known to the operator, by phase.", labels=["phase"]
        )
        counts = Tally(_job_phases.values())
        for phase in ("Pending", "Queued", "Running", "Succeeded", "Failed", "Suspended"):
            family.add_metric([phase], counts.get(phase, 0))
        yield family


REGISTRY.register(_PhaseCollector())


# ---------------------------------------------------------------- per pool and per job, for alerting
#
# Gauges are produced at scrape time from what the reconcilers last computed (the status they wrote),
# so they cost nothing between scrapes and disappear with their object. Labels: namespace, pool,
# scrapejob; the chart's ServiceMonitor honours them (honorLabels) over the target's namespace.

POOL_COUNTS = {
    "trawl_pool_backlog_tasks": ("ready", "Tasks ready to be claimed by the pool's workers."),
    "trawl_pool_delayed_tasks": ("delayed", "Tasks waiting for a retry backoff or a politeness delay."),
    "trawl_pool_in_flight_tasks": ("inFlight", "Tasks claimed by a worker and not yet finished."),
    "trawl_pool_dead_letters": ("dead", "Dead-lettered tasks of the pool's jobs."),
}
POOL_CONDITIONS = ("Ready", "Stalled", "Degraded", "ScalingLimited")
JOB_STATES = ("total", "pending", "inFlight", "succeeded", "retrying", "deadLettered")
JOB_PHASES = ("Pending", "Queued", "Running", "Succeeded", "Failed", "Suspended")


@dataclass
class _PoolSeen:
    status: dict[str, Any]
    # When the pool's backlog last moved (empty, or tasks completing): the age of a backlog that does not.
    moving_at: float
    redis_memory: RedisMemory | None = None  # the last INFO memory a pass read (kept while one fails)


_pools: dict[tuple[str, str], _PoolSeen] = {}


class _JobSeen(NamedTuple):
    """What the job gauges read of a job, and no more: a copy of its whole status (conditions, results) kept
    ~4 KB per job alive (deep size, partly shared with the status last applied) for six counts and a phase."""

    namespace: str
    name: str
    pool: str
    pool_namespace: str  # the pool's: differs from the job's for a pool shared between namespaces
    phase: str | None
    counts: tuple[float, ...]  # by JOB_STATES


_jobs: dict[str, _JobSeen] = {}


def backlog_moving(status: Mapping[str, Any]) -> bool:
    """Nothing waits, or the pool completes tasks: a backlog only ages while neither holds."""
    queue = status.get("queue") or {}
    waiting = int(queue.get("ready") or 0) + int(queue.get("delayed") or 0)
    return waiting == 0 or float(queue.get("throughputPerSecond") or 0) > 0


def record_pool(
    namespace: str,
    name: str,
    status: Mapping[str, Any],
    now: float | None = None,
    redis_memory: RedisMemory | None = None,
) -> None:
    now = time.monotonic() if now is None else now
    seen = _pools.get((namespace, name))
    moving_at = now if seen is None or backlog_moving(status) else seen.moving_at
    memory = redis_memory if redis_memory is not None or seen is None else seen.redis_memory
    _pools[(namespace, name)] = _PoolSeen(dict(status), moving_at, memory)


def forget_pool(namespace: str, name: str) -> None:
    _pools.pop((namespace, name), None)


def record_job(
    uid: str, namespace: str, name: str, pool: str, status: Mapping[str, Any], pool_namespace: str | None = None
) -> None:
    """``pool_namespace``: the pool's, when the job names one in another namespace (spec.poolNamespace)."""
    phase = status.get("phase")
    record_job_phase(uid, phase)
    counts = status.get("counts") or {}
    tasks = tuple(float(counts.get(state) or 0) for state in JOB_STATES)
    _jobs[uid] = _JobSeen(namespace, name, pool, pool_namespace or namespace, phase, tasks)


def forget_job(uid: str) -> None:
    record_job_phase(uid, None)
    _jobs.pop(uid, None)


class _ObjectCollector(Collector):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self.pool_families(self.clock())
        yield from self.tenant_families(time.time())
        yield from self.job_families()

    def pool_families(self, now: float) -> Iterator[GaugeMetricFamily]:
        pools = sorted(_pools.items())
        labels = ["namespace", "pool"]
        for metric, (key, doc) in POOL_COUNTS.items():
            family = GaugeMetricFamily(metric, doc, labels=labels)
            for (ns, name), seen in pools:
                family.add_metric([ns, name], float((seen.status.get("queue") or {}).get(key) or 0))
            yield family
        stalled = GaugeMetricFamily(
            "trawl_pool_backlog_stalled_seconds",
            "Seconds the pool has had waiting tasks without completing any (0 while empty or draining): how long "
            "its oldest pending work has been stuck at least.",
            labels=labels,
        )
        desired = GaugeMetricFamily("trawl_pool_desired_replicas", "Workers the autoscaler asks for.", labels=labels)
        ready = GaugeMetricFamily("trawl_pool_ready_replicas", "Worker pods ready.", labels=labels)
        condition = GaugeMetricFamily(
            "trawl_pool_condition", "1 while the pool's condition is True.", labels=[*labels, "condition"]
        )
        used = GaugeMetricFamily(
            "trawl_pool_redis_memory_used_bytes",
            "Memory of the pool's Redis as counted against maxmemory (a cluster: its fullest primary).",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "trawl_pool_redis_memory_max_bytes",
            "maxmemory of the pool's Redis (0: no limit); at it, a noeviction Redis refuses writes.",
            labels=labels,
        )
        for (ns, name), seen in pools:
            if seen.redis_memory is not None:
                used.add_metric([ns, name], float(seen.redis_memory.used))
                limit.add_metric([ns, name], float(seen.redis_memory.limit))
            stalled.add_metric([ns, name], 0.0 if backlog_moving(seen.status) else max(0.0, now - seen.moving_at))
            desired.add_metric([ns, name], float(seen.status.get("desiredReplicas") or 0))
            ready.add_metric([ns, name], float(seen.status.get("readyReplicas") or 0))
            conds = {c.get("type"): c.get("status") for c in seen.status.get("conditions") or []}
            for ctype in POOL_CONDITIONS:
                condition.add_metric([ns, name, ctype], 1.0 if conds.get(ctype) == "True" else 0.0)
        yield from (stalled, desired, ready, condition, used, limit)

    def tenant_families(self, wall_now: float) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Per tenant of each pool with spec.tenancy, from its status.tenants (the queue's count at the last
        poll). Throttled: 1 with the quota as reason while it holds the tenant back; throttled seconds: since
        when (the alert TrawlTenantThrottled reads it)."""
        labels = ["namespace", "pool", "tenant"]
        in_flight = GaugeMetricFamily(
            "trawl_tenant_in_flight_tasks", "Tasks a tenant's jobs have claimed now.", labels=labels
        )
        claims = CounterMetricFamily("trawl_tenant_claims", "Tasks a tenant's jobs have claimed.", labels=labels)
        pages = GaugeMetricFamily(
            "trawl_tenant_pages_today", "Tasks a tenant's jobs claimed this UTC day.", labels=labels
        )
        browser = GaugeMetricFamily(
            "trawl_tenant_browser_seconds_today",
            "Seconds a tenant's browser tasks held a browser page this UTC day (its browserSecondsPerDay quota).",
            labels=labels,
        )
        throttled = GaugeMetricFamily(
            "trawl_tenant_throttled", "1 while a quota holds the tenant's ready work back.", labels=[*labels, "reason"]
        )
        since = GaugeMetricFamily(
            "trawl_tenant_throttled_seconds",
            "Seconds a quota has held the tenant's ready work back (0 while none does).",
            labels=labels,
        )
        for (ns, name), seen in sorted(_pools.items()):
            for row in seen.status.get("tenants") or []:
                key = [ns, name, str(row.get("tenant") or "")]
                in_flight.add_metric(key, float(row.get("inFlight") or 0))
                claims.add_metric(key, float(row.get("claimedTotal") or 0))
                pages.add_metric(key, float(row.get("pagesToday") or 0))
                browser.add_metric(key, float(row.get("browserSecondsToday") or 0))
                reason = row.get("throttled")
                throttled.add_metric([*key, str(reason or "")], 1.0 if reason else 0.0)
                started = parse_time(row.get("throttledSince")) if reason else None
                since.add_metric(key, max(0.0, wall_now - started.timestamp()) if started is not None else 0.0)
        yield from (in_flight, claims, pages, browser, throttled, since)

    def job_families(self) -> Iterator[GaugeMetricFamily]:
        # "scrapejob", not "job": Prometheus's own target label is "job". pool_namespace: the pool's, which
        # differs from the job's for a job of a pool shared between namespaces.
        labels = ["namespace", "scrapejob", "pool", "pool_namespace"]
        tasks = GaugeMetricFamily("trawl_job_tasks", "A job's tasks by state.", labels=[*labels, "state"])
        phase = GaugeMetricFamily("trawl_job_phase", "1 for the job's current phase.", labels=[*labels, "phase"])
        for job in sorted(_jobs.values(), key=lambda j: (j.namespace, j.name)):
            key = [job.namespace, job.name, job.pool, job.pool_namespace]
            for state, count in zip(JOB_STATES, job.counts, strict=True):
                tasks.add_metric([*key, state], count)
            for p in JOB_PHASES:
                phase.add_metric([*key, p], 1.0 if p == job.phase else 0.0)
        yield from (tasks, phase)


REGISTRY.register(_ObjectCollector())
