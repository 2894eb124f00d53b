"""A pool's Redis password rotated in its Secret reaches the operator through its Secret watch: the
operator's clients reconnect with the new password and the old connections are closed, without a
restart, and the worker pod template changes so that the workers roll onto it. The operator runs
with its real RBAC, which has list/watch on Secrets and no get: a Secret read per reconcile (the
TTL cache this replaced) would be refused."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from operator_fixtures import apply, events_for, get, job, pool

from trawl.dev.bookstore import Bookstore
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for

OLD, NEW = "old-pass-1", "new-pass-2"


@pytest.fixture
def password_redis() -> Iterator[RedisServer]:
    with RedisServer(extra_args=["--requirepass", OLD]) as server:
        yield server


def connections_to(pid: int, port: int) -> set[int]:
    """Local ports of the process's established TCP connections to 127.0.0.1:``port`` (from /proc)."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    with open(f"/proc/{pid}/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state == "01" and inode in inodes and int(remote.split(":")[1], 16) == port:
                ports.add(int(local.split(":")[1], 16))
    return ports


def _secret(password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "redis-auth", "labels": {"trawl.dev/secret": "true"}},
        "stringData": {"password": password},
    }


def _template_version(cp: ControlPlane, namespace: str) -> str | None:
    template = get(cp, "deployment", "p-workers", namespace)["spec"]["template"]
    annotations: dict[str, str] = template["metadata"].get("annotations") or {}
    return annotations.get("trawl.dev/redis-secrets-version")


def _succeeded(cp: ControlPlane, name: str, namespace: str) -> bool:
    return (get(cp, "scrapejob", name, namespace).get("status") or {}).get("phase") == "Succeeded"


def test_a_rotated_redis_password_reaches_the_operator_and_its_old_connections_close(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    password_redis: RedisServer,
    bookstore: Bookstore,
) -> None:
    cp = control_plane
    apply(cp, _secret(OLD), namespace=namespace)
    body = pool("p", password_redis.url)
    body["spec"]["redis"]["passwordSecretRef"] = {"name": "redis-auth", "key": "password"}
    apply(cp, body, namespace=namespace)
    urls = [bookstore.url + p.path for p in bookstore.catalog.products[:6]]
    apply(cp, job("before", "p", urls[:3]), namespace=namespace)
    wait_for("job before rotation", lambda: _succeeded(cp, "before", namespace), timeout=120, diag=operator.log_tail)
    assert operator.proc is not None
    pid = operator.proc.pid
    before = wait_for("operator connected", lambda: connections_to(pid, password_redis.port), timeout=30)
    # New workers must start with the new password: let the pool's idle workers go first (on a real
    # cluster the changed pod template below rolls them; the local supervisor does not roll).
    wait_for("workers gone", lambda: supervisor.live(namespace, "p-workers") == 0, timeout=60, diag=operator.log_tail)
    version_before = _template_version(cp, namespace)
    assert version_before

    # Zero-downtime rotation: the server accepts both passwords, the Secret changes, then the old
    # password is removed. Connections authenticated with it stay open until their client closes them.
    admin = redis.Redis(port=password_redis.port, password=OLD)
    try:
        admin.execute_command("ACL", "SETUSER", "default", f">{NEW}")
        apply(cp, _secret(NEW), namespace=namespace)
        rotated = time.monotonic()

        def switched() -> set[int] | None:
            now = connections_to(pid, password_redis.port)
            return now if now and not now & before else None

        after = wait_for("old connections closed, new ones open", switched, timeout=60, diag=operator.log_tail)
        took = time.monotonic() - rotated
        admin.execute_command("ACL", "SETUSER", "default", f"<{OLD}")
        # The server agrees: none of the operator's old connections is left.
        served = {int(c["addr"].rsplit(":", 1)[1]) for c in admin.client_list()}
        assert not served & before and after & served, (before, after, served)
    finally:
        admin.close()
    print(f"rotation: old connections closed {took:.2f}s after the Secret changed (grace 5 s)")
    # The workers read the password at start: the Deployment's pod template changed with the Secret.
    wait_for(
        "worker template follows the Secret",
        lambda: _template_version(cp, namespace) not in (None, version_before),
        timeout=60,
        diag=operator.log_tail,
    )

    # Everything works on the new password alone: a new job is enqueued by the operator and fetched by
    # workers started with the rotated Secret.
    apply(cp, job("after", "p", urls[3:]), namespace=namespace)
    wait_for("job after rotation", lambda: _succeeded(cp, "after", namespace), timeout=120, diag=operator.log_tail)
    for name in ("p", "before", "after"):
        reasons = {e["reason"] for e in events_for(cp, namespace, name)}
        assert "RedisUnavailable" not in reasons, (name, reasons)
    assert "Traceback" not in operator.log_path.read_text(errors="replace"), operator.log_tail(100)
