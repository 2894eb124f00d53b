"""Prometheus metrics of the operator, served on --metrics-port at /metrics."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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
