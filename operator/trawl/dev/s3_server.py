"""A real S3-compatible server (MinIO, built by ``hack/build-minio.sh``) on a free loopback port.

:meth:`start` / :meth:`stop` as often as a test needs (an outage keeps the data and the port);
:meth:`close` removes everything.
"""

from __future__ import annotations

import glob
import os
import secrets
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from . import procs
from .scratch import ScratchServer


def minio_binary() -> Path:
    """``$TRAWL_MINIO``, else the newest build in the cache (``hack/build-minio.sh``)."""
    explicit = os.environ.get("TRAWL_MINIO")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("TRAWL_CACHE_DIR") or Path.home() / ".cache" / "trawl")
    found = sorted(glob.glob(str(cache / "s3" / "minio-*" / "minio")))
    if not found:
        raise RuntimeError("MinIO not built: run hack/build-minio.sh (make test does) or set TRAWL_MINIO")
    return Path(found[-1])


@dataclass
class S3Server(ScratchServer):
    log_name: ClassVar[str] = "minio.log"

    port: int = 0
    console_port: int = 0
    access_key: str = "trawl-test"
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16))
    region: str = "us-east-1"
    workdir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> S3Server:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="trawl-s3-"))
            (self.workdir / "data").mkdir()
        if not (self.port and self.console_port):
            a, b = procs.free_ports(2)
            self.port = self.port or a
            self.console_port = self.console_port or (b if b != self.port else a)
        env = dict(os.environ) | {
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_REGION": self.region,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "HOME": str(self.workdir),
        }
        argv = [
            str(minio_binary()),
            "server",
            str(self.workdir / "data"),
            "--address",
            f"127.0.0.1:{self.port}",
            "--console-address",
            f"127.0.0.1:{self.console_port}",
            "--quiet",
        ]
        self.proc = procs.start(argv, log_path=self.workdir / "minio.log", env=env)
        procs.wait_for_port("127.0.0.1", self.port, timeout, self.proc)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"{self.endpoint}/minio/health/ready"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"minio exited: {self.log_tail()}") from exc
                if time.monotonic() > deadline:
                    raise TimeoutError(f"minio not ready within {timeout}s: {exc}") from exc
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc, timeout=15)
            self.proc = None

    def _begin(self) -> S3Server:
        return self.start()
