"""Fixtures of the Redis Sentinel layer: one real deployment (a master, a replica, three Sentinels) per
session; the operator's fixtures are those of tests/rediscluster (a real kube-apiserver and etcd)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from rsentinel_helpers import MASTER_NAME, target

from trawl.dev.redis_sentinel import LocalRedisSentinel
from trawl.redisclient import connect

# the cluster layer's helpers (objects, waits) serve the operator test here too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[LocalRedisSentinel]:
    with LocalRedisSentinel(master_name=MASTER_NAME) as deployment:
        yield deployment


@pytest.fixture
async def sentinel_client(redis_sentinel: LocalRedisSentinel) -> AsyncIterator[aioredis.Redis]:
    """A client of the master through the Sentinels, on a healthy, flushed deployment (a test before may
    have failed the master over)."""
    redis_sentinel.wait_healthy(60)
    client = connect("", sentinel=target(redis_sentinel))
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Any]:
    from trawl.dev.controlplane import BinariesNotFound, ControlPlane, find_assets

    try:
        assets = find_assets()
    except BinariesNotFound as exc:
        pytest.fail(f"the operator's Redis Sentinel test needs kube-apiserver and etcd: {exc}", pytrace=False)
    with ControlPlane(assets=assets) as cp:
        cp.apply_crds()
        yield cp


@pytest.fixture
def namespace(control_plane: Any) -> Iterator[str]:
    name = f"rsentinel-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def operator(control_plane: Any, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
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
def supervisor(control_plane: Any, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from trawl.dev.supervisor import WorkerSupervisor

    sup = WorkerSupervisor(
        control_plane.api_client(), tmp_path_factory.mktemp("workers"), namespaces=[namespace], drain_timeout=20
    )
    sup.start()
    try:
        yield sup
    finally:
        sup.stop()
