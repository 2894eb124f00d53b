"""Real upstream proxies on free loopback ports, for tests: Debian's ``tinyproxy`` (HTTP, CONNECT, Basic
auth) and ``danted`` (SOCKS5, from Debian's dante-server). Each runs in the foreground with a generated
configuration and logs every request, so a test can tell what reached the proxy."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from . import procs


@dataclass
class _ProxyServer:
    port: int = 0
    workdir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    binary = ""
    package = ""
    scheme = ""

    def _config(self) -> str:
        raise NotImplementedError

    def _argv(self, exe: str, config: Path) -> list[str]:
        raise NotImplementedError

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "proxy.log"

    def log(self) -> str:
        """What the proxy logged so far (its own log file and its output)."""
        assert self.workdir is not None
        return "".join(p.read_text(errors="replace") for p in (self.log_path, self.workdir / "out.log") if p.exists())

    def url(self, username: str | None = None, password: str | None = None) -> str:
        creds = f"{username}:{password}@" if username is not None else ""
        return f"{self.scheme}://{creds}127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> Self:
        exe = shutil.which(self.binary) or shutil.which(f"/usr/sbin/{self.binary}")
        if exe is None:
            raise RuntimeError(f"{self.binary} not found; install the Debian package {self.package}")
        self.workdir = Path(tempfile.mkdtemp(prefix=f"trawl-{self.binary}-"))
        self.port = self.port or procs.free_port()
        config = self.workdir / "proxy.conf"
        config.write_text(self._config())
        self.proc = procs.start(self._argv(exe, config), log_path=self.workdir / "out.log")
        procs.wait_for_port("127.0.0.1", self.port, timeout, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc, timeout=5)
            self.proc = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass
class TinyProxy(_ProxyServer):
    """tinyproxy with Basic auth (``username``/``password``; None: open); ``add_headers`` go on every plain-http
    request it forwards (bench/proxies.py tells its proxies apart so)."""

    username: str | None = None
    password: str | None = None
    add_headers: tuple[tuple[str, str], ...] = ()

    binary = "tinyproxy"
    package = "tinyproxy"
    scheme = "http"

    def _config(self) -> str:
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 30",
            f'LogFile "{self.log_path}"',
            "LogLevel Info",
            "MaxClients 64",
            "Allow 127.0.0.1",
            "DisableViaHeader Yes",
        ]
        if self.username is not None:
            lines.append(f"BasicAuth {self.username} {self.password}")
        lines += [f'AddHeader "{name}" "{value}"' for name, value in self.add_headers]
        return "\n".join(lines) + "\n"

    def _argv(self, exe: str, config: Path) -> list[str]:
        return [exe, "-d", "-c", str(config)]


@dataclass
class Danted(_ProxyServer):
    """Dante's SOCKS5 server without authentication (its username method checks system accounts, which a
    test must not create), connecting out from 127.0.0.1."""

    binary = "danted"
    package = "dante-server"
    scheme = "socks5"

    def _config(self) -> str:
        return (
            f"logoutput: {self.log_path}\n"
            f"internal: 127.0.0.1 port = {self.port}\n"
            "external: 127.0.0.1\n"
            "clientmethod: none\n"
            "socksmethod: none\n"
            "client pass {\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n  log: connect error\n}\n"
            "socks pass {\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n  command: connect\n  log: connect error\n}\n"
        )

    def _argv(self, exe: str, config: Path) -> list[str]:
        assert self.workdir is not None
        return [exe, "-f", str(config), "-p", str(self.workdir / "danted.pid"), "-N", "1"]
