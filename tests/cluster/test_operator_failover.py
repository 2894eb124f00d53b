"""High availability: two operators elect a leader on a Lease; SIGKILL the leader mid-job and the
standby takes over within the lease duration, the job completes, and no task is enqueued twice."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_fixtures import apply, get, job, pool, wait_complete, wait_for

from trawl.dev.bookstore import Bookstore
from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.redis_server import RedisServer

LEASE_SECONDS = 6
RETRY_SECONDS = 0.5


@pytest.fixture
def operators(
    control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[OperatorProcess]]:
    apply(control_plane, *rbac_objects(namespace, "trawl-operator", [namespace]))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "trawl-operator")
    logs = tmp_path_factory.mktemp("operators")
    env = {
        "TRAWL_JOB_SYNC_SECONDS": "1",
        "TRAWL_POOL_SYNC_SECONDS": "1",
        "TRAWL_CRON_SYNC_SECONDS": "1",
        "POD_NAMESPACE": namespace,
        "TRAWL_LEASE_DURATION_SECONDS": str(LEASE_SECONDS),
        "TRAWL_LEASE_RENEW_SECONDS": "1",
        "TRAWL_LEASE_RENEW_DEADLINE_SECONDS": "4",
        "TRAWL_LEASE_RETRY_SECONDS": str(RETRY_SECONDS),
    }
    procs = [
        OperatorProcess(
            kubeconfig, [namespace], Path(logs / f"operator-{i}.log"), env=env, extra_args=["--leader-election"]
        )
        for i in range(2)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()
            print(f"--- {proc.log_path}:\n{proc.log_tail(40)}")


def _lease(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    out = cp.kubectl("get", "lease", "trawl-operator", "-n", namespace, "-o", "json")
    spec: dict[str, Any] = json.loads(out.stdout)["spec"]
    return spec


def test_standby_takes_over_when_the_leader_is_killed_mid_job(
    control_plane: ControlPlane,
    namespace: str,
    operators: list[OperatorProcess],
    supervisor: Any,
    redis_server: RedisServer,
    bookstore: Bookstore,
) -> None:
    cp = control_plane
    first, second = operators
    first.start()
    wait_for("first operator leads", first.is_leader, timeout=60, diag=first.log_tail)
    second.start()  # healthy (its /healthz answers) while standing by
    assert not second.is_leader()

    body = pool("p", redis_server.url)
    body["spec"]["autoscaling"]["minReplicas"] = 1
    apply(cp, body, namespace=namespace)
    products = bookstore.catalog.products[:30]
    urls = [bookstore.url + p.path for p in products]
    # Two requests a second to the one host (the default politeness): the job runs for ~15 s.
    apply(cp, job("j", "p", urls), namespace=namespace)

    def running() -> bool:
        status = get(cp, "scrapejob", "j", namespace).get("status") or {}
        return status.get("phase") == "Running" and 0 < (status.get("counts") or {}).get("succeeded", 0) < len(urls)

    wait_for("job running", running, timeout=120, diag=first.log_tail)
    holder_before = _lease(cp, namespace)["holderIdentity"]
    first.kill()
    killed_at = time.monotonic()
    wait_for("standby leads", second.is_leader, timeout=LEASE_SECONDS * 4 + 30, diag=second.log_tail)
    takeover = time.monotonic() - killed_at
    lease = _lease(cp, namespace)
    print(f"failover: standby took the Lease {takeover:.2f}s after SIGKILL (lease {LEASE_SECONDS}s)")
    assert lease["holderIdentity"] != holder_before and lease["leaseTransitions"] >= 1
    # Expiry is counted from the standby's last sight of a renewal (at most 1 s before the kill),
    # plus one retry period; the rest is what a loaded machine adds.
    assert takeover <= LEASE_SECONDS + RETRY_SECONDS + 10, takeover

    wait_complete(cp, "j", namespace, timeout=180, diag=second.log_tail)
    status = get(cp, "scrapejob", "j", namespace)["status"]
    assert status["counts"]["total"] == len(urls)  # the new leader's enqueue added nothing
    assert status["counts"]["succeeded"] == len(urls)
    assert status["observedGeneration"] == get(cp, "scrapejob", "j", namespace)["metadata"]["generation"]
    fetched = collections.Counter(
        line.split()[2] for line in bookstore.access_log.read_text().splitlines() if "/product/" in line
    )
    assert {p.path: fetched[p.path] for p in products} == {p.path: 1 for p in products}
    # The new leader keeps the pool's status converging too.
    pool_status = get(cp, "scrapepool", "p", namespace)["status"]
    assert pool_status["observedGeneration"] == get(cp, "scrapepool", "p", namespace)["metadata"]["generation"]
    assert "Traceback" not in second.log_path.read_text(errors="replace"), second.log_tail(100)
