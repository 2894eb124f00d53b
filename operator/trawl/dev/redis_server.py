"""A real ``redis-server`` on a free loopback port, for tests, benchmarks and ``trawl dev up``."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from . import procs


@dataclass
class RedisServer:
    """Start with :meth:`start` (or as a context manager); :meth:`stop` removes the process and data."""

    port: int = 0
    workdir: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    binary: str = "redis-server"
    proc: subprocess.Popen[bytes] | None = None
    _own_dir: bool = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> RedisServer:
        exe = shutil.which(self.binary)
        if exe is None:
            raise RuntimeError("redis-server not found on PATH; install the Debian package redis-server")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="trawl-redis-"))
            self._own_dir = True
        self.port = self.port or procs.free_port()
        argv = [
            exe,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            *self.extra_args,
        ]
        self.proc = procs.start(argv, log_path=self.workdir / "redis.log")
        procs.wait_for_port("127.0.0.1", self.port, timeout, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc, timeout=5)
            self.proc = None
        if self._own_dir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def wait_ready(self, timeout: float = 10.0) -> None:
        import redis

        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.AuthenticationError:
                    return  # it answered: a server started with --requirepass
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        finally:
            client.close()

    def __enter__(self) -> RedisServer:
        self.start()
        self.wait_ready()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
