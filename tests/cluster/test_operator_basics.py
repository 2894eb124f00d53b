"""The operator against a real API server and Redis, as its own ServiceAccount: pools, jobs, problems."""

from __future__ import annotations

from typing import Any

from operator_fixtures import apply, condition, events_for, exists, get, job, pool

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for


def test_pool_creates_worker_deployment_and_reports_ready(
    control_plane: ControlPlane, namespace: str, operator: Any, redis_server: RedisServer
) -> None:
    apply(control_plane, pool("p1", redis_server.url), namespace=namespace)
    dep = wait_for(
        "worker Deployment",
        lambda: (
            exists(control_plane, "deployment", "p1-workers", namespace)
            and get(control_plane, "deployment", "p1-workers", namespace)
        ),
        diag=operator.log_tail,
    )
    owner = dep["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("ScrapePool", "p1", True)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TRAWL_REDIS_URL"] == redis_server.url
    assert env["TRAWL_QUEUE_PREFIX"] == f"trawl:{{{namespace}/p1}}"
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 20

    def ready() -> Any:
        obj = get(control_plane, "scrapepool", "p1", namespace)
        cond = condition(obj, "Ready")
        return cond and cond["status"] == "True" and obj

    obj = wait_for("pool Ready", ready, diag=operator.log_tail)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert obj["status"]["selector"].startswith("app.kubernetes.io/name=trawl")


def test_job_is_enqueued_and_queued(
    control_plane: ControlPlane, namespace: str, operator: Any, redis_server: RedisServer
) -> None:
    apply(control_plane, pool("p1", redis_server.url), namespace=namespace)
    urls = [f"http://127.0.0.1:9/page/{i}" for i in range(25)]
    apply(control_plane, job("j1", "p1", urls), namespace=namespace)

    def queued() -> Any:
        obj = get(control_plane, "scrapejob", "j1", namespace)
        return (obj.get("status") or {}).get("phase") == "Queued" and obj

    obj = wait_for("job Queued", queued, diag=operator.log_tail)
    status = obj["status"]
    assert status["counts"]["total"] == 25
    assert status["counts"]["pending"] == 25
    assert condition(obj, "Reconciling")["status"] == "True"  # type: ignore[index]
    assert condition(obj, "Ready")["status"] == "False"  # type: ignore[index]
    assert status["results"]["location"].startswith("redis: ")
    out = control_plane.kubectl("get", "sj", "-n", namespace).stdout
    assert "Queued" in out and "j1" in out


def test_missing_pool_and_invalid_spec_stall_with_events(
    control_plane: ControlPlane, namespace: str, operator: Any, redis_server: RedisServer
) -> None:
    apply(control_plane, job("orphan", "no-such-pool", ["http://127.0.0.1:9/"]), namespace=namespace)

    def stalled(name: str, reason: str) -> Any:
        def check() -> Any:
            obj = get(control_plane, "scrapejob", name, namespace)
            cond = condition(obj, "Stalled")
            return cond and cond["status"] == "True" and cond["reason"] == reason and obj

        return check

    obj = wait_for("Stalled PoolNotFound", stalled("orphan", "PoolNotFound"), diag=operator.log_tail)
    assert "no-such-pool" in condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert condition(obj, "Ready")["status"] == "False"  # type: ignore[index]
    wait_for(
        "PoolNotFound event",
        lambda: any(e["reason"] == "PoolNotFound" for e in events_for(control_plane, namespace, "orphan")),
    )
    # Creating the pool un-stalls the job: level-triggered, not a one-shot failure.
    apply(control_plane, pool("no-such-pool", redis_server.url), namespace=namespace)
    wait_for(
        "job Queued once the pool exists",
        lambda: (get(control_plane, "scrapejob", "orphan", namespace).get("status") or {}).get("phase") == "Queued",
        diag=operator.log_tail,
    )
    # A pool whose Redis does not answer stalls its jobs with RedisUnavailable.
    apply(control_plane, pool("dead-redis", "redis://127.0.0.1:1/0"), namespace=namespace)
    apply(control_plane, job("unlucky", "dead-redis", ["http://127.0.0.1:9/"]), namespace=namespace)
    obj = wait_for("Stalled RedisUnavailable", stalled("unlucky", "RedisUnavailable"), diag=operator.log_tail)
    assert "127.0.0.1:1" in condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert operator.running
