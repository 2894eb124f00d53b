"""Issue 33, a pool shared between teams (ScrapeJob spec.poolNamespace), against a real API server, the
operator with its own RBAC watching the platform's namespace and three teams', and real workers.

The platform runs pool ``shared`` in its namespace with spec.tenancy listing two teams' namespaces (weights
3 and 1), and pool ``private`` with no tenancy. Each team is the tenant of tests/cluster/tenancy.py
(ScrapeJob rights in its own namespace only):

- a job of each listed team naming ``shared`` is admitted, registered in the pool's Redis under the pool's
  namespace with its own namespace as tenant (field ``tn``), run by the pool's workers to Succeeded;
- a job of a team the tenancy does not list (no defaultTenant), and a job of a listed team naming
  ``private`` (no tenancy: it serves only its own namespace), are Stalled with reason PoolNotShared, told
  once (one Warning Event), and nothing of them is in Redis;
- neither of the refused jobs holds the platform's deletion of its pools; a served job does.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from operator_fixtures import apply, condition, events_for, exists, get, job, pool, wait_complete
from tenancy import make_tenant

from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from waits import wait_for


@pytest.fixture
def teams(control_plane: ControlPlane, namespace: str) -> Iterator[dict[str, str]]:
    """Three teams' namespaces beside the platform's (the test's ``namespace``): a, b (listed) and x (not)."""
    suffix = uuid.uuid4().hex[:6]
    names = {team: f"team-{team}-{suffix}" for team in ("a", "b", "x")}
    for name in names.values():
        control_plane.create_namespace(name)
    try:
        yield names
    finally:
        for name in names.values():
            control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def platform_operator(
    control_plane: ControlPlane, namespace: str, teams: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`trawl operator` watching the platform's namespace and the teams', with the RBAC it is given for them."""
    watched = [namespace, *teams.values()]
    apply(control_plane, *rbac_objects(namespace, "trawl-operator", watched))
    logs = tmp_path_factory.mktemp("operator")
    proc = OperatorProcess(
        control_plane.service_account_kubeconfig(namespace, "trawl-operator"),
        watched,
        logs / "operator.log",
        env={"TRAWL_JOB_SYNC_SECONDS": "1", "TRAWL_POOL_SYNC_SECONDS": "1", "TRAWL_CRON_SYNC_SECONDS": "1"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        print(f"--- operator log tail:\n{proc.log_tail(80)}")


def _stalled(cp: ControlPlane, namespace: str, name: str, reason: str) -> Any:
    cond = condition(get(cp, "scrapejob", name, namespace), "Stalled") or {}
    return cond.get("status") == "True" and cond.get("reason") == reason and cond


def test_teams_share_the_platforms_pool_that_their_namespaces_are_tenants_of(
    control_plane: ControlPlane,
    namespace: str,
    teams: dict[str, str],
    platform_operator: OperatorProcess,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    team_a, team_b, team_x = (make_tenant(control_plane, teams[t]) for t in ("a", "b", "x"))
    urls = [f"{bookstore.url}/", f"{bookstore.url}/index.html", f"{bookstore.url}/product/1.html"]
    tenancy = {"tenants": [{"name": teams["a"], "weight": 3}, {"name": teams["b"], "weight": 1}]}
    try:
        apply(
            control_plane,
            pool("shared", redis_server.url, tenancy=tenancy),
            pool("private", redis_server.url),
            namespace=namespace,
        )
        wait_for("Deployment", lambda: exists(control_plane, "deployment", "shared-workers", namespace))
        shared = {"poolNamespace": namespace}
        team_a.apply(job("crawl-a", "shared", urls, **shared), job("sneaky", "private", urls, **shared))
        team_b.apply(job("crawl-b", "shared", urls, **shared))
        team_x.apply(job("outsider", "shared", urls, **shared))

        keys = Keys(f"trawl:{{{namespace}/shared}}")
        for tenant, name in ((team_a, "crawl-a"), (team_b, "crawl-b")):
            uid = get(control_plane, "scrapejob", name, tenant.namespace)["metadata"]["uid"]
            registered = wait_for(
                f"{name} registered",
                lambda uid=uid: client.hgetall(keys.job(uid)) or None,
                diag=platform_operator.log_tail,
            )
            assert registered["tn"] == tenant.namespace
        for tenant, name in ((team_a, "crawl-a"), (team_b, "crawl-b")):
            wait_complete(control_plane, name, tenant.namespace, 120, platform_operator.log_tail)
            obj = get(control_plane, "scrapejob", name, tenant.namespace)
            assert obj["status"]["phase"] == "Succeeded" and obj["status"]["tenant"] == tenant.namespace
            assert obj["status"]["counts"]["succeeded"] == len(urls)
            # The job's Events are on the job, in its namespace, where its author reads them.
            assert "Completed" in {e["reason"] for e in events_for(control_plane, tenant.namespace, name)}
        # The pool counts both teams as its tenants, with the weights the platform gave them.
        rows = (get(control_plane, "scrapepool", "shared", namespace).get("status") or {}).get("tenants") or []
        weights = {r["tenant"]: r["weight"] for r in rows}
        assert weights == {teams["a"]: 3, teams["b"]: 1}

        outsider = wait_for(
            "outsider refused", lambda: _stalled(control_plane, teams["x"], "outsider", "PoolNotShared")
        )
        assert outsider["message"] == (
            f"ScrapePool {namespace}/shared serves only its own namespace and the tenants its spec.tenancy admits; "
            f"its spec.tenancy must admit tenant {teams['x']!r} (namespace {teams['x']!r}): list it, or set a "
            "defaultTenant"
        )
        sneaky = wait_for("sneaky refused", lambda: _stalled(control_plane, teams["a"], "sneaky", "PoolNotShared"))
        assert sneaky["message"].startswith(f"ScrapePool {namespace}/private serves only its own namespace")
        for ns, name, pool_name in ((teams["x"], "outsider", "shared"), (teams["a"], "sneaky", "private")):
            obj = get(control_plane, "scrapejob", name, ns)
            assert obj["status"]["phase"] == "Pending"
            assert not client.exists(Keys(f"trawl:{{{namespace}/{pool_name}}}").job(obj["metadata"]["uid"]))
            reasons = Counter(e["reason"] for e in events_for(control_plane, ns, name))
            assert reasons["PoolNotShared"] == 1, (name, reasons)  # told once, not at every pass
            warnings = [e for e in events_for(control_plane, ns, name) if e["reason"] == "PoolNotShared"]
            assert warnings[0]["type"] == "Warning"

        # The pool a job runs on is fixed: its author cannot move it to another namespace's pool.
        moved = team_a.kubectl(
            "patch", "scrapejob", "crawl-a", "--type=merge", "-p", '{"spec": {"poolNamespace": "elsewhere"}}',
            check=False,
        )  # fmt: skip
        assert moved.returncode != 0 and "poolNamespace is immutable" in moved.stderr

        # A job the pool refused does not keep the platform from deleting it: private goes.
        control_plane.kubectl("delete", "scrapepool", "private", "-n", namespace, "--wait=false")
        wait_for(
            "private deleted",
            lambda: not exists(control_plane, "scrapepool", "private", namespace),
            diag=platform_operator.log_tail,
        )
        # A served job of another namespace holds the shared pool's deletion, named namespace/name.
        control_plane.kubectl("delete", "scrapepool", "shared", "-n", namespace, "--wait=false")

        def blocked() -> Any:
            found = [e for e in events_for(control_plane, namespace, "shared") if e["reason"] == "DeletionBlocked"]
            return found and found[0]["message"]

        message = wait_for("shared held", blocked, diag=platform_operator.log_tail)
        assert f"{teams['a']}/crawl-a" in message and f"{teams['b']}/crawl-b" in message
        assert "outsider" not in message
        assert platform_operator.running
    finally:
        for key in client.scan_iter(match=f"trawl:{{{namespace}/*", count=1000):
            client.unlink(key)
        client.close()
