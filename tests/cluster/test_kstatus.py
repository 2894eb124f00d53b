"""What Flux reads of live objects: kstatus itself (hack/kstatus, the cli-utils library Flux's health checks
call) on the objects as the API server returns them, in every state the operator puts them in: the table in
docs/architecture.md ("What GitOps tools read"). Above all, a job or schedule at rest by request (suspended)
is Current, so a Flux ``wait`` on it ends; a job waiting for something that comes by itself is InProgress."""

from __future__ import annotations

import json
from typing import Any

from operator_fixtures import apply, get, job, pool

from kstatus_tool import KStatus, kstatus
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for


def _live(cp: ControlPlane, namespace: str) -> dict[str, KStatus]:
    """kstatus of every Trawl object of the namespace, read from the API server as Flux reads them."""
    out = cp.kubectl("get", "scrapejobs,scrapepools,cronscrapejobs", "-n", namespace, "-o", "json")
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return kstatus(*items)


def _phase(cp: ControlPlane, name: str, namespace: str) -> str | None:
    return (get(cp, "scrapejob", name, namespace).get("status") or {}).get("phase")


def _observed(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    """The object once the operator has judged its current generation."""
    obj = get(cp, kind, name, namespace)
    return obj if (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"] else None


def test_each_state_reads_as_documented(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    cp = control_plane
    apply(cp, pool("p", redis_server.url), pool("idle", redis_server.url), namespace=namespace)
    slow = {"politeness": {"requestsPerSecond": 1, "maxConcurrencyPerDomain": 1}}
    cron = {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "CronScrapeJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "suspend": True,
            "jobTemplate": {"spec": {"pool": "p", "urls": [bookstore.url + "/"]}},
        },
    }
    apply(
        cp,
        job("done", "p", [bookstore.product_url(1), bookstore.product_url(2)]),
        job("dead", "p", [f"{bookstore.url}/hostile/404?id={namespace}"]),  # 1 dead letter, 0 tolerated
        # Valid for the API server's schema, invalid for the operator: a pattern RE2 cannot run.
        job("invalid", "p", [bookstore.url + "/"], crawl={"include": ["(a)\\1"]}),
        job("busy", "p", [bookstore.product_url(i) for i in range(1, 101)], **slow),
        job("paused", "p", [bookstore.product_url(i) for i in range(1, 6)], suspend=True),
        cron,
        namespace=namespace,
    )
    wanted = {"done": "Succeeded", "dead": "Failed", "busy": "Running", "paused": "Suspended"}
    wait_for(
        "every job in its state",
        lambda: (
            all(_phase(cp, name, namespace) == phase for name, phase in wanted.items())
            and _observed(cp, "scrapejob", "invalid", namespace)
            and _observed(cp, "cronscrapejob", "nightly", namespace)
            and _observed(cp, "scrapepool", "idle", namespace)
        ),
        timeout=120,
        diag=operator.log_tail,
    )
    got = _live(cp, namespace)
    # The pool of the work scales with it: InProgress while workers start (Reconciling=True, Scaling), else
    # Current; tests/unit/test_kstatus_health.py pins each of its states.
    assert got.pop("ScrapePool/p").status in {"Current", "InProgress"}, got
    assert {ref: s.status for ref, s in got.items()} == {
        "ScrapeJob/done": "Current",
        "ScrapeJob/dead": "Failed",
        "ScrapeJob/invalid": "Failed",
        "ScrapeJob/busy": "InProgress",
        "ScrapeJob/paused": "Current",  # at rest by request: a Flux wait on it ends
        "CronScrapeJob/nightly": "Current",
        "ScrapePool/idle": "Current",  # no work, scaled to zero
    }, got
    assert "more than the 0 tolerated" in got["ScrapeJob/dead"].message
    assert "spec.crawl.include" in got["ScrapeJob/invalid"].message
    assert "workers are processing" in got["ScrapeJob/busy"].message

    # A running job suspended is at rest (Current) once the operator has seen the edit, and InProgress again
    # once resumed: the generation check covers the moment between.
    patch = ["patch", "scrapejob/busy", "-n", namespace, "--type=merge", "-p"]
    cp.kubectl(*patch, '{"spec":{"suspend":true}}')
    wait_for("busy suspended", lambda: _phase(cp, "busy", namespace) == "Suspended", diag=operator.log_tail)
    assert _live(cp, namespace)["ScrapeJob/busy"].status == "Current"
    cp.kubectl(*patch, '{"spec":{"suspend":false}}')
    wait_for("busy resumed", lambda: _phase(cp, "busy", namespace) == "Running", diag=operator.log_tail)
    assert _live(cp, namespace)["ScrapeJob/busy"].status == "InProgress"


def test_a_job_held_by_its_tenants_quota_is_in_progress(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    """QuotaExceeded (issue 33) → InProgress: the hold ends by itself (tasks finish, the rate window moves, the
    day turns), so it is work under way, never Current (a Flux wait would pass too early) nor Failed. A tenant
    allowed one page a day, its job of three: the first is fetched, the other two wait on the quota, and the
    job says so under the operator and real workers."""
    cp = control_plane
    tenancy = {"tenants": [{"name": namespace, "quotas": {"pagesPerDay": 1}}]}
    apply(cp, pool("p", redis_server.url, tenancy=tenancy), namespace=namespace)
    apply(cp, job("held", "p", [bookstore.product_url(i) for i in range(1, 4)]), namespace=namespace)

    def held() -> Any:
        obj = get(cp, "scrapejob", "held", namespace)
        reconciling = next((c for c in (obj.get("status") or {}).get("conditions") or []
                            if c["type"] == "Reconciling"), {})  # fmt: skip
        return reconciling.get("reason") == "QuotaExceeded" and obj

    obj = wait_for("held shows QuotaExceeded", held, timeout=120, diag=operator.log_tail)
    assert obj["status"]["counts"]["succeeded"] == 1 and obj["status"]["counts"]["pending"] == 2
    message = "its tenant is over a quota of its pool (1/1 pages today): its tasks wait"
    assert _live(cp, namespace)["ScrapeJob/held"] == ("InProgress", message)
    # The pool counts the two apart from its ready work: they do not scale it up.
    wait_for(
        "the pool's held tasks",
        lambda: ((get(cp, "scrapepool", "p", namespace).get("status") or {}).get("queue") or {}).get("held") == 2,
        diag=operator.log_tail,
    )
