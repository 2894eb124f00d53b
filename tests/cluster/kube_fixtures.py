"""The operator's test fixtures on a real kube-apiserver + etcd, shared by every layer that runs the operator
(cluster, rediscluster, redissentinel): one control plane per session, a namespace per test, `trawl
operator` under the namespace's ServiceAccount, and a supervisor standing in for the kubelet.

A conftest imports them (``from kube_fixtures import control_plane, namespace, operator, supervisor, tenant``).
There is no controller manager: a deleted namespace stays Terminating and owner references are not
garbage collected, so each test gets a fresh, uniquely named namespace instead of cleaning up.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from trawl.dev.controlplane import BinariesNotFound, ControlPlane, find_assets


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A running control plane with the Trawl CRDs applied and Established."""
    try:
        assets = find_assets()
    except BinariesNotFound as exc:
        pytest.fail(f"cluster tests need kube-apiserver and etcd: {exc}", pytrace=False)
    with ControlPlane(assets=assets) as cp:
        cp.apply_crds()
        yield cp


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; deleted (without waiting) afterwards."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def operator(control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """`trawl operator` watching the test's namespace, authenticated as its ServiceAccount with the
    RBAC of trawl.operator.rbac: a permission it lacks fails the test."""
    from operator_fixtures import apply

    from trawl.dev.operator_process import OperatorProcess, rbac_objects

    apply(control_plane, *rbac_objects(namespace, "trawl-operator", [namespace]))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "trawl-operator")
    logs = tmp_path_factory.mktemp("operator")
    proc = OperatorProcess(
        kubeconfig,
        [namespace],
        logs / "operator.log",
        env={"TRAWL_JOB_SYNC_SECONDS": "1", "TRAWL_POOL_SYNC_SECONDS": "1", "TRAWL_CRON_SYNC_SECONDS": "1"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        print(f"--- operator log tail ({logs / 'operator.log'}):\n{proc.log_tail(80)}")


@pytest.fixture
def tenant(control_plane: ControlPlane, namespace: str) -> Any:
    """The least-trusted user of the test's namespace: ScrapeJob and CronScrapeJob rights only (tenancy.py)."""
    from tenancy import make_tenant

    return make_tenant(control_plane, namespace)


@pytest.fixture
def supervisor(control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Runs `trawl worker` processes for the test namespace's worker Deployments, as a kubelet would."""
    from trawl.dev.supervisor import WorkerSupervisor

    sup = WorkerSupervisor(
        control_plane.api_client(), tmp_path_factory.mktemp("workers"), namespaces=[namespace], drain_timeout=20
    )
    sup.start()
    try:
        yield sup
    finally:
        sup.stop()
