"""Operator shards (issue 37): objects labelled sharding.trawl.dev/key=b are reconciled by the shard-b
operators only, the others by the main operator only (each writes status under its own field manager, so
managedFields tell who wrote); killing shard b's leader pauses only b's objects, and its standby takes
over within one lease of the leader's last renewal while the main operator goes on."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from operator_fixtures import apply, get, job, pool
from test_operator_failover import SLACK, LeaseHistory

from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.redis_server import RedisServer
from trawl.operator.sharding import SHARD_LABEL
from waits import wait_for

# Long enough that the main operator's answer to an update comes well within shard b's pause.
LEASE_SECONDS = 12


@pytest.fixture
def shards(
    control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, list[OperatorProcess]]]:
    apply(control_plane, *rbac_objects(namespace, "trawl-operator", [namespace]))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "trawl-operator")
    logs = tmp_path_factory.mktemp("shards")
    env = {
        "TRAWL_JOB_SYNC_SECONDS": "1",
        "TRAWL_POOL_SYNC_SECONDS": "1",
        "POD_NAMESPACE": namespace,
        "TRAWL_LEASE_DURATION_SECONDS": str(LEASE_SECONDS),
        "TRAWL_LEASE_RENEW_SECONDS": "1",
        "TRAWL_LEASE_RENEW_DEADLINE_SECONDS": "4",
        "TRAWL_LEASE_RETRY_SECONDS": "1",
    }

    def operator(log: str, *args: str) -> OperatorProcess:
        return OperatorProcess(
            kubeconfig, [namespace], Path(logs / log), env=env, extra_args=["--leader-election", *args]
        )

    main = operator("main.log", "--unsharded-only")
    shard_b = [operator(f"b-{i}.log", "--shard", "b") for i in range(2)]
    try:
        yield main, shard_b
    finally:
        for proc in (main, *shard_b):
            proc.stop()
            print(f"--- {proc.log_path}:\n{proc.log_tail(30)}")


def _identity(proc: OperatorProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.health_port}/healthz", timeout=5) as resp:
        return str(json.loads(resp.read())["identity"])


def _status_writers(cp: ControlPlane, kind: str, name: str, namespace: str) -> set[str]:
    """The field managers of the object's status (kubectl leaves managedFields out unless asked)."""
    out = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--show-managed-fields")
    fields = json.loads(out.stdout)["metadata"].get("managedFields") or []
    return {m["manager"] for m in fields if m.get("subresource") == "status"}


def _labelled(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["labels"] = {SHARD_LABEL: "b"}
    return obj


def _phase(cp: ControlPlane, name: str, namespace: str) -> str | None:
    return (get(cp, "scrapejob", name, namespace).get("status") or {}).get("phase")


def test_each_object_has_one_shard_and_a_lost_shard_leader_pauses_only_its_objects(
    control_plane: ControlPlane,
    namespace: str,
    shards: tuple[OperatorProcess, list[OperatorProcess]],
    redis_server: RedisServer,
) -> None:
    cp = control_plane
    main, shard_b = shards
    for proc in (main, *shard_b):
        proc.start()
    logs = lambda: "\n".join(p.log_tail(20) for p in (main, *shard_b))  # noqa: E731
    wait_for("the main operator leads", main.is_leader, timeout=90, diag=logs)
    wait_for("a shard-b operator leads", lambda: any(p.is_leader() for p in shard_b), timeout=90, diag=logs)
    url = redis_server.url
    apply(cp, pool("pa", url), _labelled(pool("pb", url)), namespace=namespace)
    jobs = job("ja", "pa", ["http://127.0.0.1:9/a"]), _labelled(job("jb", "pb", ["http://127.0.0.1:9/b"]))
    apply(cp, *jobs, namespace=namespace)

    def reconciled() -> bool:
        objs = [get(cp, k, n, namespace) for k, n in (("scrapepool", "pa"), ("scrapepool", "pb"))]
        return all(o.get("status") for o in objs) and bool(_phase(cp, "ja", namespace) and _phase(cp, "jb", namespace))

    wait_for("both shards' objects reconciled", reconciled, timeout=120, diag=logs)
    # Jobs: status by server-side apply, under the shard's own field manager. Pools: their status goes
    # through kopf (manager "kopf" for every shard), so their worker Deployment's creation tells who acted.
    assert _status_writers(cp, "scrapejob", "ja", namespace) == {"trawl-operator"}
    assert _status_writers(cp, "scrapejob", "jb", namespace) == {"trawl-operator-b"}
    b_logs = "".join(p.log_path.read_text() for p in shard_b)
    for name, own, other in (("pa", main.log_path.read_text(), b_logs), ("pb", b_logs, main.log_path.read_text())):
        created = f"created Deployment {namespace}/{name}-workers"
        assert created in own and created not in other, name

    leader = next(p for p in shard_b if p.is_leader())
    standby = next(p for p in shard_b if p is not leader)
    old, new = _identity(leader), _identity(standby)
    main_identity = _identity(main)
    with LeaseHistory(cp, namespace, "trawl-operator-b") as lease_b:
        wait_for("the shard's Lease seen", lambda: lease_b.holder() == old, timeout=30)
        leader.kill()
        for name in ("ja", "jb"):
            cp.kubectl("patch", "scrapejob", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        wait_for("the main shard's job suspended", lambda: _phase(cp, "ja", namespace) == "Suspended", timeout=60)
        main_answered = datetime.now(UTC)
        wait_for("shard b's job suspended", lambda: _phase(cp, "jb", namespace) == "Suspended", timeout=120, diag=logs)
        renew, acquire, holder = lease_b.taken_from(old)
    assert holder == new
    pause = (acquire - renew).total_seconds()
    print(f"shard b: Lease taken {pause:.2f}s after the dead leader's last renewal (lease {LEASE_SECONDS}s)")
    assert pause <= LEASE_SECONDS + SLACK, pause
    # Only b paused: the main operator answered while b had no leader, and kept its own Lease throughout.
    assert main_answered < acquire, (main_answered, acquire)
    assert main.is_leader() and _identity(main) == main_identity
    assert _status_writers(cp, "scrapejob", "jb", namespace) == {"trawl-operator-b"}
    assert _status_writers(cp, "scrapejob", "ja", namespace) == {"trawl-operator"}
