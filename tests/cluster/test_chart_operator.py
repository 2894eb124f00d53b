"""The operator installed from the rendered chart's RBAC: the chart's ServiceAccount, (Cluster)Roles and
bindings are applied, `trawl operator` runs authenticated as that ServiceAccount (a real token, so
every request goes through RBAC), and a ScrapeJob whose pool reads its Redis URL from a Secret runs to
Complete. Worker pods are run by the local supervisor, as a kubelet would run them."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_fixtures import apply, get, job, pool, wait_complete

from helm_chart import dump_all, operator_deployment, operator_rbac_objects, render, service_account_name
from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess
from trawl.dev.redis_server import RedisServer
from waits import wait_for


@pytest.fixture(params=["cluster-wide", "namespaced"])
def chart_operator(
    request: pytest.FixtureRequest, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """`trawl operator` with exactly the chart's RBAC, installed into the test namespace. Cluster-wide RBAC
    still runs the operator with --namespace (the shared control plane holds other tests' objects)."""
    release = f"t{uuid.uuid4().hex[:6]}"
    overrides = {"defaultPool.enabled": "false"}
    if request.param == "namespaced":
        overrides["watchNamespaces"] = f"{{{namespace}}}"
    docs = render(namespace=namespace, release=release, set_values=overrides)
    control_plane.kubectl("apply", "-f", "-", input=dump_all(operator_rbac_objects(docs)))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, service_account_name(docs))
    args = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (f"--namespace={namespace}" in args) == (request.param == "namespaced")
    # As the chart runs it: with leader election on a Lease in the release namespace (the chart's Role).
    assert "--leader-election" in args
    proc = OperatorProcess(
        kubeconfig,
        [namespace],
        tmp_path / "operator.log",
        env={"TRAWL_JOB_SYNC_SECONDS": "1", "TRAWL_POOL_SYNC_SECONDS": "1", "POD_NAMESPACE": namespace},
        extra_args=["--leader-election"],
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        print(f"--- operator log tail:\n{proc.log_tail(80)}")


def test_operator_with_chart_rbac_completes_a_job(
    control_plane: ControlPlane,
    namespace: str,
    chart_operator: OperatorProcess,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "redis-url", "labels": {"trawl.dev/secret": "true"}},
        "data": {"url": base64.b64encode(redis_server.url.encode()).decode()},
    }
    body = pool("shop", redis_server.url)
    body["spec"]["redis"] = {"urlSecretRef": {"name": "redis-url", "key": "url"}}
    apply(control_plane, secret, body, namespace=namespace)
    urls = [bookstore.url + "/", *(bookstore.product_url(i) for i in range(1, 11))]
    apply(control_plane, job("chart-rbac", "shop", urls), namespace=namespace)

    def diag() -> str:
        state = control_plane.kubectl(
            "get", "scrapepool,deployment,pods", "-n", namespace, "-o", "yaml", check=False
        ).stdout
        logs = sorted(supervisor.log_dir.glob("*.log"))
        tails = [f"--- {p.name}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs[-3:]]
        return f"{chart_operator.log_tail(60)}\n--- pool, workers:\n{state[-3000:]}\n" + "\n".join(tails)

    wait_complete(control_plane, "chart-rbac", namespace, 180, diag)
    status = get(control_plane, "scrapejob", "chart-rbac", namespace)["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"]["succeeded"] == len(urls) and status["counts"]["deadLettered"] == 0
    ready = wait_for(
        "pool status",
        lambda: (get(control_plane, "scrapepool", "shop", namespace).get("status") or {}).get("observedGeneration"),
        diag=diag,
    )
    assert ready == 1
    log = chart_operator.log_tail(2000)
    assert "Forbidden" not in log and " 403" not in log, log
