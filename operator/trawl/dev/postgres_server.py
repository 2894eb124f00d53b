"""A real PostgreSQL server (Debian's binaries) on a free loopback port, for tests and benchmarks.

``initdb`` once into a private directory (password authentication, fsync off: throw-away data), then
:meth:`start` / :meth:`stop` the postmaster as often as a test needs (a sink outage keeps the data and
the port), and :meth:`close` removes everything. postgres refuses to run as root, so when this process
is root the server runs as the ``postgres`` account.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from . import procs
from .scratch import ScratchServer


def pg_bindir() -> Path:
    """The newest installed /usr/lib/postgresql/<major>/bin (Debian's package postgresql)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found; install the Debian package postgresql")
    return Path(found[-1]).parent


@dataclass
class PostgresServer(ScratchServer):
    log_name: ClassVar[str] = "postgres.log"

    port: int = 0
    user: str = "trawl"
    password: str = field(default_factory=lambda: secrets.token_hex(12))
    database: str = "trawl"
    workdir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    _run_as: str | None = None

    @property
    def datadir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "data"

    def dsn(self, database: str | None = None) -> str:
        return (
            f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database or self.database}"
            "?sslmode=disable"
        )

    def init(self) -> PostgresServer:
        bindir = pg_bindir()
        self.workdir = Path(tempfile.mkdtemp(prefix="trawl-pg-"))
        self._run_as = "postgres" if os.geteuid() == 0 else None
        pwfile = self.workdir / "pw"
        pwfile.write_text(self.password + "\n")
        if self._run_as is not None:
            ent = pwd.getpwnam(self._run_as)
            os.chown(self.workdir, ent.pw_uid, ent.pw_gid)
            os.chown(pwfile, ent.pw_uid, ent.pw_gid)
        argv = [
            str(bindir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            self.user,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        done = subprocess.run(argv, capture_output=True, user=self._run_as, timeout=180, check=False)
        pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.decode(errors='replace')[-2000:]}")
        # The database the tests use (template1 is always there to connect to).
        self.port = self.port or procs.free_port()
        self.start()
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        return self

    def start(self, timeout: float = 60.0) -> PostgresServer:
        assert self.workdir is not None
        argv = [
            str(pg_bindir() / "postgres"),
            "-D",
            str(self.datadir),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.workdir}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=100",
            "-c",
            "shared_buffers=32MB",
        ]
        self.proc = procs.start(argv, log_path=self.workdir / "postgres.log", user=self._run_as)
        procs.wait_for_port("127.0.0.1", self.port, timeout, self.proc)
        self._wait_accepting(timeout)
        return self

    def _wait_accepting(self, timeout: float) -> None:
        """The port opens before recovery ends ("the database system is starting up")."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=5):
                    return
            except psycopg.OperationalError as exc:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"postgres exited: {self.log_tail()}") from exc
                if time.monotonic() > deadline:
                    raise TimeoutError(f"postgres did not accept connections within {timeout}s: {exc}") from exc
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server, keeping its data and port for :meth:`start` (SIGINT: fast shutdown)."""
        if self.proc is not None:
            procs.stop(self.proc, timeout=20, sig=signal.SIGINT)
            self.proc = None

    def _begin(self) -> PostgresServer:
        return self.init()
