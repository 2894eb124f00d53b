"""Measured pod start-up: read from pods the way the controller lists them, fed to the policy by plan()."""

from __future__ import annotations

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.autoscale.startup import DEFAULT_STARTUP_SECONDS, KEEP, StartupEstimate, pod_startup, record
from trawl.autoscale.step import plan
from trawl.queue.model import PoolSignals


def pod(uid: str, created: str, ready: str | None, status: str = "True") -> dict[str, object]:
    conds = [] if ready is None else [{"type": "Ready", "status": status, "lastTransitionTime": ready}]
    return {"metadata": {"uid": uid, "creationTimestamp": created}, "status": {"conditions": conds}}


def sig(ready: int, t: float) -> PoolSignals:
    return PoolSignals(ready, 0, 0, 0, 0, 0, 0, 0.0, {}, t)


def test_pod_startup_is_creation_to_ready() -> None:
    assert pod_startup(pod("a", "2026-01-01T00:00:00Z", "2026-01-01T00:00:07Z")) == ("a", 7.0)
    assert pod_startup(pod("b", "2026-01-01T00:00:00Z", None)) is None  # not Ready yet
    assert pod_startup(pod("c", "2026-01-01T00:00:00Z", "2026-01-01T00:00:07Z", status="False")) is None
    assert pod_startup({"metadata": {"uid": "d"}}) is None


def test_estimate_default_then_median_of_recent_pods_each_counted_once() -> None:
    est = StartupEstimate()
    assert est.measured is None and est.seconds == DEFAULT_STARTUP_SECONDS
    est = record(est, [("a", 4.0), ("b", 6.0), ("c", 50.0)])
    assert est.seconds == 6.0
    assert record(est, [("c", 1.0)]) == est  # a pod is measured once (its Ready may flip later)
    assert record(est, [("x", 5000.0)]) == est  # not a start-up (readiness flipped much later)
    for i in range(2 * KEEP):
        est = record(est, [(f"n{i}", 3.0)])
    assert len(est.samples) == KEEP and est.seconds == 3.0


def test_plan_uses_the_measured_startup_in_the_observation() -> None:
    pool = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379"}})
    first = plan(pool, sig(100, 0.0), 0)
    assert first.observation is not None and first.observation.startup_seconds == DEFAULT_STARTUP_SECONDS
    second = plan(pool, sig(100, 5.0), 1, first.state, pod_startups=[("p1", 4.5)])
    assert second.observation is not None and second.observation.startup_seconds == 4.5
    assert second.state.startup.measured == 4.5


def test_plan_ceiling_from_job_entries() -> None:
    pool = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379"}, "autoscaling": {"maxReplicas": 50}})
    jobs = [{"waiting": 3000, "hosts": ["a.example"], "politeness": {"requestsPerSecond": 5}}]
    r = plan(pool, sig(3000, 0.0), 1, None, jobs=jobs)
    assert r.observation is not None and r.observation.rate_limit_ceiling_replicas == 1
    r = plan(pool, sig(3000, 0.0), 1, None, jobs=[{"waiting": 3000, "hosts": None}])
    assert r.observation is not None and r.observation.rate_limit_ceiling_replicas is None
