"""Namespaces, Secrets and pool deletion: what the operator may touch, and what it must not."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from operator_fixtures import apply, condition, events_for, exists, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane, find_assets
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.redis_server import RedisServer
from waits import wait_for


def _secret(name: str, namespace: str, *, labelled: bool = True, **data: str) -> dict[str, Any]:
    """A Secret; labelled (by default) for the operator to read it."""
    labels = {"trawl.dev/secret": "true"} if labelled else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def test_namespaced_operator_watches_secrets_of_watched_namespaces_only(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    other = control_plane.create_namespace(f"{namespace[:50]}-other")
    apply(control_plane, _secret("elsewhere", other, password="x"))
    sa = control_plane.service_account_kubeconfig(namespace, "trawl-operator")

    def can(*args: str) -> bool:
        out = control_plane.kubectl("auth", "can-i", *args, kubeconfig=sa, check=False)
        return out.stdout.strip() == "yes"

    # Secrets are watched into the operator's index (never fetched one by one, never written)...
    assert can("list", "secrets", "-n", namespace) and can("watch", "secrets", "-n", namespace)
    assert not can("get", "secrets", "-n", namespace) and not can("update", "secrets", "-n", namespace)
    # ...and only in the namespaces it watches.
    assert not can("list", "secrets", "-n", other) and not can("watch", "secrets", "-n", other)
    assert not can("get", "secret/elsewhere", "-n", other)
    # Nor can it touch workloads or Trawl objects outside the namespaces it watches.
    assert not can("create", "deployments", "-n", other)
    assert not can("list", "scrapejobs.trawl.dev", "-n", other)
    # A pool in an unwatched namespace is not reconciled (no Deployment appears there).
    apply(control_plane, pool("ignored", "redis://127.0.0.1:1/0"), namespace=other)
    apply(control_plane, pool("watched", "redis://127.0.0.1:1/0"), namespace=namespace)
    wait_for("watched pool reconciled", lambda: exists(control_plane, "deployment", "watched-workers", namespace))
    assert not exists(control_plane, "deployment", "ignored-workers", other)
    assert (get(control_plane, "scrapepool", "ignored", other).get("status") or {}).get("observedGeneration") == -1


def test_password_protected_redis_through_secrets_never_leaks(
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
    supervisor: Any,
    bookstore: Any,
    tmp_path: Path,
) -> None:
    password = "s3cret-Pa55word"
    with RedisServer(extra_args=["--requirepass", password]) as guarded:
        apply(control_plane, _secret("redis-auth", namespace, password=password), namespace=namespace)
        spec = pool("secure", guarded.url)
        spec["spec"]["redis"] = {"url": guarded.url, "passwordSecretRef": {"name": "redis-auth", "key": "password"}}
        apply(control_plane, spec, namespace=namespace)
        dep = wait_for(
            "Deployment",
            lambda: (
                exists(control_plane, "deployment", "secure-workers", namespace)
                and get(control_plane, "deployment", "secure-workers", namespace)
            ),
        )
        env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["TRAWL_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "redis-auth", "key": "password"}
        apply(
            control_plane, job("authed", "secure", [bookstore.product_url(i) for i in range(1, 6)]), namespace=namespace
        )
        wait_complete(control_plane, "authed", namespace, 120, operator.log_tail)
        everything = json.dumps(
            [
                get(control_plane, k, n, namespace)
                for k, n in (("scrapepool", "secure"), ("scrapejob", "authed"), ("deployment", "secure-workers"))
            ]
        )
        events = json.dumps(events_for(control_plane, namespace, "secure"))
        assert password not in everything + events + operator.log_tail(1000)

        # The wrong password: the pool and its jobs stall with a message that names no secret value.
        apply(control_plane, _secret("redis-auth", namespace, password="wrong-one"), namespace=namespace)
        control_plane.kubectl("annotate", "scrapepool/secure", "-n", namespace, "touch=1")

        def stalled() -> Any:
            cond = condition(get(control_plane, "scrapepool", "secure", namespace), "Stalled")
            return cond and cond["status"] == "True" and cond

        cond = wait_for("Stalled", stalled, timeout=60, diag=operator.log_tail)
        assert cond["reason"] == "RedisUnavailable"
        assert "wrong-one" not in json.dumps(cond) and password not in json.dumps(cond)


def test_a_pool_whose_redis_secret_is_not_labelled_is_stalled_with_the_fix_until_it_is(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, supervisor: Any, bookstore: Any
) -> None:
    """The operator reads only the Secrets labelled trawl.dev/secret=true (its watch asks the API server
    for those alone). A pool whose Redis password is in an unlabelled Secret is Stalled, and its message
    gives the command that labels it; labelled, the pool works and its job completes. When the label goes
    again, the pool stalls again and its workers keep their template: no roll onto settings out of sight."""
    cp, password = control_plane, "un1abelled-Pa55"
    fix = f"kubectl label secret redis-auth -n {namespace} trawl.dev/secret=true"

    def stalled_with_the_fix() -> Any:
        cond = condition(get(cp, "scrapepool", "quiet", namespace), "Stalled")
        return cond and cond["status"] == "True" and cond["reason"] == "RedisUnavailable" and fix in cond["message"]

    with RedisServer(extra_args=["--requirepass", password]) as guarded:
        apply(cp, _secret("redis-auth", namespace, labelled=False, password=password), namespace=namespace)
        spec = pool("quiet", guarded.url)
        spec["spec"]["redis"] = {"url": guarded.url, "passwordSecretRef": {"name": "redis-auth", "key": "password"}}
        apply(cp, spec, job("waits", "quiet", [bookstore.product_url(i) for i in range(1, 4)]), namespace=namespace)
        wait_for("pool Stalled with the fix", stalled_with_the_fix, timeout=60, diag=operator.log_tail)
        assert (get(cp, "scrapejob", "waits", namespace).get("status") or {}).get("phase") in (None, "Pending")

        cp.kubectl("label", "secret", "redis-auth", "-n", namespace, "trawl.dev/secret=true")
        wait_complete(cp, "waits", namespace, 120, operator.log_tail)
        wait_for(
            "pool no longer Stalled",
            lambda: condition(get(cp, "scrapepool", "quiet", namespace), "Stalled")["status"] == "False",  # type: ignore[index]
            timeout=60,
            diag=operator.log_tail,
        )
        template = get(cp, "deployment", "quiet-workers", namespace)["spec"]["template"]

        cp.kubectl("label", "secret", "redis-auth", "-n", namespace, "trawl.dev/secret-")
        wait_for("pool Stalled again", stalled_with_the_fix, timeout=60, diag=operator.log_tail)
        assert get(cp, "deployment", "quiet-workers", namespace)["spec"]["template"] == template
        assert password not in json.dumps(get(cp, "scrapepool", "quiet", namespace)) + operator.log_tail(1000)


def test_pool_deletion_waits_for_running_jobs_then_removes_its_deployment(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, redis_server: RedisServer
) -> None:
    apply(control_plane, pool("p", redis_server.url), namespace=namespace)
    apply(control_plane, job("busy", "p", ["http://127.0.0.1:9/"]), namespace=namespace)
    wait_for(
        "queued",
        lambda: (get(control_plane, "scrapejob", "busy", namespace).get("status") or {}).get("phase") == "Queued",
        diag=operator.log_tail,
    )
    control_plane.kubectl("delete", "scrapepool/p", "-n", namespace, "--wait=false")
    wait_for(
        "DeletionBlocked event",
        lambda: any(e["reason"] == "DeletionBlocked" for e in events_for(control_plane, namespace, "p")),
        diag=operator.log_tail,
    )
    assert exists(control_plane, "scrapepool", "p", namespace)
    assert exists(control_plane, "deployment", "p-workers", namespace)
    control_plane.kubectl("delete", "scrapejob/busy", "-n", namespace, "--timeout=60s")
    wait_for(
        "pool gone", lambda: not exists(control_plane, "scrapepool", "p", namespace), timeout=60, diag=operator.log_tail
    )
    assert not exists(control_plane, "deployment", "p-workers", namespace)


def test_cluster_wide_operator_with_cluster_role(tmp_path: Path) -> None:
    """--all-namespaces with the ClusterRole variant of the same rules, on a control plane of its own."""
    with ControlPlane(assets=find_assets()) as cp, RedisServer() as redis_server:
        cp.apply_crds()
        ns_a, ns_b = cp.create_namespace("team-a"), cp.create_namespace("team-b")
        sys_ns = cp.create_namespace("trawl-system")
        apply(cp, *rbac_objects(sys_ns, "trawl-operator", None))
        op = OperatorProcess(
            cp.service_account_kubeconfig(sys_ns, "trawl-operator"),
            None,
            tmp_path / "op.log",
            env={"TRAWL_JOB_SYNC_SECONDS": "1"},
        ).start()
        try:
            for ns in (ns_a, ns_b):
                apply(cp, pool("p", redis_server.url), job("j", "p", ["http://127.0.0.1:9/x"]), namespace=ns)
            for ns in (ns_a, ns_b):
                wait_for(
                    f"job queued in {ns}",
                    lambda ns=ns: (get(cp, "scrapejob", "j", ns).get("status") or {}).get("phase") == "Queued",
                    diag=op.log_tail,
                )
                assert exists(cp, "deployment", "p-workers", ns)
        finally:
            op.stop()
