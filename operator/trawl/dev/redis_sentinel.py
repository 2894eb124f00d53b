"""A real Redis Sentinel deployment of ``redis-server`` processes on free loopback ports, for tests.

One master, its replicas (``--replicaof``) and three Sentinels (``redis-server <conf> --sentinel``)
monitoring it under one name with a quorum of 2, ``down-after-milliseconds`` 1000 and
``failover-timeout`` 5000, so a killed master's replica is promoted within a few seconds. Every
process and the scratch folder are removed by :meth:`LocalRedisSentinel.stop`, also when start-up
fails half-way.
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


@dataclass
class LocalRedisSentinel:
    master_name: str = "m"
    replicas: int = 1
    sentinel_count: int = 3
    quorum: int = 2
    down_after_ms: int = 1000
    failover_timeout_ms: int = 5000
    workdir: Path | None = None
    servers: dict[int, RedisServer] = field(default_factory=dict)
    sentinels: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def sentinel_addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in sorted(self.sentinels)]

    def start(self, timeout: float = 60.0) -> LocalRedisSentinel:
        self.workdir = Path(tempfile.mkdtemp(prefix="trawl-rsentinel-"))
        try:
            ports = procs.free_ports(1 + self.replicas + self.sentinel_count)
            master, replicas, sentinels = ports[0], ports[1 : 1 + self.replicas], ports[1 + self.replicas :]
            self._start_server(master)
            for port in replicas:
                self._start_server(port, ["--replicaof", "127.0.0.1", str(master)])
            for port in sentinels:
                self._start_sentinel(port, master)
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_server(self, port: int, extra: list[str] | None = None) -> None:
        assert self.workdir is not None
        node_dir = self.workdir / str(port)
        node_dir.mkdir(exist_ok=True)
        server = RedisServer(port=port, workdir=node_dir, extra_args=extra or [])
        server.start()
        server.wait_ready()
        self.servers[port] = server

    def _start_sentinel(self, port: int, master: int) -> None:
        assert self.workdir is not None
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found on PATH; install the Debian package redis-server")
        folder = self.workdir / f"sentinel-{port}"
        folder.mkdir(exist_ok=True)
        conf = folder / "sentinel.conf"  # a Sentinel rewrites its configuration: one writable file each
        name = self.master_name
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {name} 127.0.0.1 {master} {self.quorum}\n"
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}\n"
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {name} 1\n"
        )
        proc = procs.start([exe, str(conf), "--sentinel"], log_path=folder / "sentinel.log")
        self.sentinels[port] = proc
        procs.wait_for_port("127.0.0.1", port, 15, proc)

    def command(self, port: int, *args: Any) -> Any:
        """One command on one server or Sentinel, on a connection of its own."""
        client = redis.Redis(port=port, socket_timeout=5, socket_connect_timeout=2, decode_responses=True)
        try:
            return client.execute_command(*args)  # type: ignore[no-untyped-call]
        finally:
            client.close()

    def _live_sentinels(self) -> list[int]:
        return [p for p, proc in self.sentinels.items() if proc.poll() is None]

    def master_port(self) -> int:
        """The master's port as the Sentinels report it (all of them must agree)."""
        seen = {
            int(self.command(p, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)[1])
            for p in self._live_sentinels()
        }
        if len(seen) != 1:
            raise RuntimeError(f"the Sentinels disagree on the master: {sorted(seen)}")
        return seen.pop()

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Every Sentinel sees the same live master, the other Sentinels and every replica; every replica's
        link to the master is up (so a following kill has a replica to promote)."""
        deadline = time.monotonic() + timeout
        problem: str | None = "not checked"
        while time.monotonic() < deadline:
            problem = self._health_problem()
            if problem is None:
                return
            time.sleep(0.1)
        raise TimeoutError(f"Redis Sentinel deployment not healthy within {timeout}s: {problem}")

    def _health_problem(self) -> str | None:
        try:
            master = self.master_port()
            for port in self._live_sentinels():
                state = self._master_state(port)
                if state.get("flags") != "master":
                    return f"Sentinel {port}: master flags {state.get('flags')}"
                if int(state.get("num-other-sentinels", 0)) < self.sentinel_count - 1:
                    return f"Sentinel {port} sees {state.get('num-other-sentinels')} other Sentinels"
                if int(state.get("num-slaves", 0)) < self.replicas:
                    return f"Sentinel {port} sees {state.get('num-slaves')} replicas"
            info = self.command(master, "INFO", "replication")
        except (redis.RedisError, RuntimeError) as exc:
            return str(exc)
        if info.get("role") != "master":
            return f"the reported master {master} is a {info.get('role')}"
        online = [
            v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
        ]
        if len(online) < self.replicas:
            return f"master {master}: {len(online)} replicas online, want {self.replicas}"
        for port, server in self.servers.items():
            if port == master or server.proc is None:
                continue
            link = self.command(port, "INFO", "replication").get("master_link_status")
            if link != "up":
                return f"replica {port}: link to the master is {link}"
        return None

    def _master_state(self, sentinel_port: int) -> dict[str, Any]:
        raw = self.command(sentinel_port, "SENTINEL", "MASTER", self.master_name)
        if isinstance(raw, dict):
            return raw
        return dict(zip(raw[::2], raw[1::2], strict=True))

    def kill(self, port: int) -> None:
        """SIGKILL one data node (no shutdown, no save): what a crashed machine does."""
        server = self.servers[port]
        assert server.proc is not None
        procs.stop(server.proc, timeout=0, sig=signal.SIGKILL)
        server.proc = None

    def restart(self, port: int) -> None:
        """Start a killed node again, empty: the Sentinels turn it into a replica of the current master."""
        self._start_server(port)

    def wait_promoted(self, old_port: int, timeout: float = 60.0) -> int:
        """Wait until every Sentinel reports a master other than ``old_port`` and that node is a master."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                port = self.master_port()
                if port != old_port and self.command(port, "INFO", "replication").get("role") == "master":
                    return port
            except (redis.RedisError, RuntimeError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"no replica took over from master {old_port} within {timeout}s")

    def stop(self) -> None:
        for proc in self.sentinels.values():
            procs.stop(proc, timeout=5)
        self.sentinels.clear()
        for server in self.servers.values():
            server.stop()
        self.servers.clear()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> LocalRedisSentinel:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
