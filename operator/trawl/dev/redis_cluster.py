"""A real Redis Cluster of ``redis-server`` processes on free loopback ports, for tests and benchmarks.

Three masters and three replicas by default, created with ``redis-cli --cluster create``. The node
timeout is short (1.5 s) so a killed master's replica is promoted within seconds. Every process and
the scratch folder are removed by :meth:`LocalRedisCluster.stop`, also when start-up fails half-way.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from . import procs
from .redis_server import RedisServer


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``: a node's id, port, role and (for a master) its slot ranges."""

    node_id: str
    port: int
    master: bool
    failed: bool
    master_id: str | None
    slots: tuple[tuple[int, int], ...]

    def owns(self, slot: int) -> bool:
        return any(lo <= slot <= hi for lo, hi in self.slots)


def parse_cluster_nodes(text: str) -> list[ClusterNode]:
    nodes: list[ClusterNode] = []
    for line in text.strip().splitlines():
        parts = line.split()
        flags = parts[2].split(",")
        addr = parts[1].split("@", 1)[0]
        slots: list[tuple[int, int]] = []
        for item in parts[8:]:
            if item.startswith("["):  # a slot being migrated
                continue
            lo, _, hi = item.partition("-")
            slots.append((int(lo), int(hi or lo)))
        nodes.append(
            ClusterNode(
                node_id=parts[0],
                port=int(addr.rsplit(":", 1)[1]),
                master="master" in flags,
                failed="fail" in flags or "fail?" in flags,
                master_id=None if parts[3] == "-" else parts[3],
                slots=tuple(slots),
            )
        )
    return nodes


@dataclass
class LocalRedisCluster:
    masters: int = 3
    replicas_per_master: int = 1
    node_timeout_ms: int = 1500
    workdir: Path | None = None
    servers: dict[int, RedisServer] = field(default_factory=dict)
    _bus_ports: dict[int, int] = field(default_factory=dict)

    @property
    def ports(self) -> list[int]:
        return sorted(self.servers)

    @property
    def url(self) -> str:
        """A URL of one node: the cluster client discovers the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 60.0) -> LocalRedisCluster:
        count = self.masters * (1 + self.replicas_per_master)
        self.workdir = Path(tempfile.mkdtemp(prefix="trawl-rcluster-"))
        try:
            ports = procs.free_ports(2 * count)
            for port, bus in zip(ports[:count], ports[count:], strict=True):
                self._bus_ports[port] = bus
                self._start_node(port)
            exe = shutil.which("redis-cli")
            if exe is None:
                raise RuntimeError("redis-cli not found on PATH; install the Debian package redis-tools")
            create = subprocess.run(
                [
                    exe,
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{p}" for p in ports[:count]),
                    "--cluster-replicas",
                    str(self.replicas_per_master),
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if create.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout[-2000:]}{create.stderr}")
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, port: int) -> None:
        assert self.workdir is not None
        node_dir = self.workdir / str(port)
        node_dir.mkdir(exist_ok=True)
        server = RedisServer(
            port=port,
            workdir=node_dir,
            extra_args=[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                str(self._bus_ports[port]),
                "--cluster-node-timeout",
                str(self.node_timeout_ms),
                # A replica is promoted however long it was cut off: the test cluster must heal.
                "--cluster-replica-validity-factor",
                "0",
            ],
        )
        server.start()
        server.wait_ready()
        self.servers[port] = server

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=5, socket_connect_timeout=2)

    def command(self, port: int, *args: Any) -> Any:
        """One command on one node (CLUSTER NODES, SETSLOT, ...), on a connection of its own."""
        c = self.client(port)
        try:
            return c.execute_command(*args)  # type: ignore[no-untyped-call]
        finally:
            c.close()

    def nodes(self) -> list[ClusterNode]:
        """The cluster's view from a live node."""
        last: Exception | None = None
        for port in self.ports:
            server = self.servers[port]
            if server.proc is None or server.proc.poll() is not None:
                continue
            try:
                return parse_cluster_nodes(self.command(port, "CLUSTER", "NODES").decode())
            except redis.RedisError as exc:
                last = exc
        raise RuntimeError(f"no cluster node answers: {last}")

    def master_for_slot(self, slot: int) -> ClusterNode:
        for node in self.nodes():
            if node.master and not node.failed and node.owns(slot):
                return node
        raise LookupError(f"no live master owns slot {slot}")

    def keyslot(self, key: str) -> int:
        return int(self.command(self.ports[0], "CLUSTER", "KEYSLOT", key))

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Every live node says cluster_state:ok and sees every slot served by a live master with a
        replica that is in sync (so a following kill has a replica to promote)."""
        deadline = time.monotonic() + timeout
        problem: str | None = "not checked"
        while time.monotonic() < deadline:
            problem = self._health_problem()
            if problem is None:
                return
            time.sleep(0.1)
        raise TimeoutError(f"Redis Cluster not healthy within {timeout}s: {problem}")

    def _health_problem(self) -> str | None:
        live = [p for p, s in self.servers.items() if s.proc is not None and s.proc.poll() is None]
        for port in live:
            try:
                info = self.command(port, "CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return f"node {port}: cluster_state not ok"
                nodes = parse_cluster_nodes(self.command(port, "CLUSTER", "NODES").decode())
                role = self.command(port, "INFO", "replication")
            except redis.RedisError as exc:
                return f"node {port}: {exc}"
            if len([n for n in nodes if not n.failed]) < len(live):
                return f"node {port} sees {len(nodes)} nodes, {len(live)} live"
            if role.get("role") == "slave" and role.get("master_link_status") != "up":
                return f"replica {port}: link to its master is {role.get('master_link_status')}"
        masters = [n for n in self.nodes() if n.master and not n.failed and n.slots]
        if len(masters) != self.masters:
            return f"{len(masters)} masters serve slots, want {self.masters}"
        return None

    def kill(self, port: int) -> None:
        """SIGKILL one node (no shutdown, no save): what a crashed machine does."""
        server = self.servers[port]
        assert server.proc is not None
        procs.stop(server.proc, timeout=0, sig=signal.SIGKILL)
        server.proc = None

    def restart(self, port: int) -> None:
        """Start a killed node again with its nodes.conf: it rejoins (a former master as a replica)."""
        self._start_node(port)

    def wait_promoted(self, slot: int, old_port: int, timeout: float = 60.0) -> ClusterNode:
        """Wait until a node other than ``old_port`` serves ``slot`` as master."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                node = self.master_for_slot(slot)
                if node.port != old_port:
                    return node
            except (LookupError, RuntimeError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"slot {slot} was not taken over from {old_port} within {timeout}s")

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
