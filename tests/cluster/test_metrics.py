"""Prometheus metrics of the operator and a worker, scraped while a job runs through both.

The pool's worker.metricsPort reaches the worker process through the supervisor (as TRAWL_METRICS_PORT
reaches a pod; on one host the supervisor swaps in a free loopback port per worker), so the worker's
/metrics is scraped exactly as a PodMonitor would. Both endpoints are
parsed with prometheus_client's parser; every series the Grafana dashboard queries must be among them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from metrics_page import Scrape, scrape_url
from operator_fixtures import apply, exists, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "charts/trawl/dashboards/trawl-dashboard.json"


def test_operator_and_worker_metrics_and_the_dashboard_series(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    cp = control_plane
    # The template's default metrics port (9090, held during the run by tests/conftest.py): the
    # supervisor gives the worker a free loopback port instead, as each pod would have its own IP.
    metered = pool(
        "metered",
        redis_server.url,
        worker={"concurrency": 8, "drainSeconds": 5, "allowedCidrs": ["127.0.0.0/8"]},
        autoscaling={"minReplicas": 0, "maxReplicas": 1, "idleSecondsBeforeZero": 600, "pollSeconds": 1},
        # One tenant (the namespace), so the per-tenant series the dashboard reads are exported too.
        tenancy={"tenants": [{"name": namespace, "weight": 2, "quotas": {"pagesPerDay": 1000}}]},
    )
    broken = pool("broken", "redis://127.0.0.1:1/0")  # nobody listens: the operator counts a Redis error
    apply(cp, metered, broken, namespace=namespace)
    wait_for("Deployment", lambda: exists(cp, "deployment", "metered-workers", namespace))

    products = [bookstore.product_url(i) for i in range(1, 11)]
    urls = [
        *products,
        f"{bookstore.url}/hostile/429?id={namespace}&after=1",  # deferred once (Retry-After), then ok
        f"{bookstore.url}/hostile/404?id={namespace}",  # permanent failure: one dead letter, tolerated
    ]
    spec = {"maxDeadLetters": 1, "politeness": {"requestsPerSecond": 100, "maxConcurrencyPerDomain": 8}}
    apply(cp, job("measured", "metered", urls, **spec), namespace=namespace)
    wait_complete(cp, "measured", namespace, 120, lambda: operator.log_tail(40))
    status = get(cp, "scrapejob", "measured", namespace)["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"]["succeeded"] == 11 and status["counts"]["deadLettered"] == 1

    # -------------------------------------------------------------- the worker's endpoint
    assert supervisor.live(namespace, "metered-workers") == 1
    (port,) = supervisor.metrics_ports(namespace, "metered-workers")
    assert port != 9090
    w = wait_for(
        "worker metrics after the last result",
        lambda: (
            (s := scrape_url(f"http://127.0.0.1:{port}/metrics")).value("trawl_worker_results_written_total") >= 11
            and s
        ),
        timeout=20,
    )
    assert w.value("trawl_worker_fetches_total", outcome="ok") == 11
    assert w.value("trawl_worker_fetches_total", outcome="HTTP4xx") == 1
    assert w.value("trawl_worker_results_written_total") == 11
    assert w.value("trawl_worker_task_outcomes_total", outcome="acked") == 11
    assert w.value("trawl_worker_task_outcomes_total", outcome="dead") == 1
    assert w.value("trawl_worker_rate_limit_deferrals_total", reason="retry_after") == 1
    assert w.value("trawl_worker_claimed_tasks_total") >= 13  # 12 URLs, the 429 twice
    assert w.value("trawl_worker_fetch_seconds_count") == 11
    assert w.value("trawl_worker_fetch_seconds_bucket", le="+Inf") == 11
    assert 0 < w.value("trawl_worker_fetch_seconds_sum") < 30
    assert w.value("trawl_worker_task_seconds_count") >= 12
    assert w.value("trawl_worker_response_bytes_total") > 11 * 500
    assert w.value("trawl_worker_wire_bytes_total") > 0
    assert w.value("trawl_worker_in_flight") == 0
    assert w.value("trawl_worker_draining") == 0

    # -------------------------------------------------------------- the operator's endpoint
    def operator_scrape() -> Scrape | None:
        s = Scrape(operator.metrics_text())
        done = s.value("trawl_operator_jobs", phase="Succeeded") == 1
        return s if done and s.samples.get("trawl_operator_redis_errors_total") else None

    o = wait_for("operator metrics", operator_scrape, timeout=30, diag=lambda: operator.metrics_text()[-3000:])
    assert o.value("trawl_operator_jobs", phase="Succeeded") == 1
    assert o.value("trawl_operator_jobs") == 1  # summed over the phases: one job
    assert {"Pending", "Queued", "Running", "Succeeded", "Failed", "Suspended"} <= o.labels(
        "trawl_operator_jobs", "phase"
    )
    assert o.value("trawl_operator_status_patches_total", kind="ScrapeJob") > 0
    assert o.value("trawl_operator_status_patches_total", kind="ScrapePool") > 0
    assert o.value("trawl_operator_reconcile_seconds_count", kind="ScrapeJob") > 0
    assert o.value("trawl_operator_reconcile_seconds_count", kind="ScrapePool") > 0
    assert o.value("trawl_operator_reconcile_seconds_bucket", kind="ScrapeJob", le="+Inf") == o.value(
        "trawl_operator_reconcile_seconds_count", kind="ScrapeJob"
    )
    assert o.value("trawl_operator_scaling_decisions_total", pool=f"{namespace}/metered", direction="up") >= 1
    assert o.value("trawl_operator_redis_errors_total", kind="ScrapePool") >= 1
    tenant = {"namespace": namespace, "pool": "metered", "tenant": namespace}
    wait_for(
        "the tenant's claims on the pool's status",
        lambda: Scrape(operator.metrics_text()).value("trawl_tenant_claims_total", **tenant) >= 13,
        diag=operator.log_tail,
    )
    o = Scrape(operator.metrics_text())
    assert o.value("trawl_tenant_in_flight_tasks", **tenant) == 0
    assert o.value("trawl_tenant_pages_today", **tenant) >= 13  # every attempt counts
    assert o.value("trawl_tenant_throttled_seconds", **tenant) == 0

    # -------------------------------------------------------------- the dashboard
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        m
        for p in dashboard["panels"]
        for t in p.get("targets", [])
        for m in re.findall(r"\btrawl_[a-z0-9_]+", t["expr"])
    }
    exported = set(o.samples) | set(w.samples)
    assert queried, "the dashboard queries nothing"
    missing = {m for m in queried if m not in exported}
    assert not missing, f"dashboard series missing from both endpoints: {sorted(missing)}"
