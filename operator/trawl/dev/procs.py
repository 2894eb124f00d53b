"""Starting and reliably stopping helper processes.

Every process is started in its own session (process group) so it can be stopped with its
children, and is registered so an ``atexit`` hook and signal handlers stop it even when a test
fails or the run is interrupted: a test run must never leave etcd, an API server or Redis behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

_live: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def start(
    argv: Sequence[str],
    *,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a process in a new session, logging to ``log_path`` (or discarding output)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]
    with _lock:
        _live.add(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0, sig: int = signal.SIGTERM) -> int | None:
    """Stop a process group: the signal first, SIGKILL after ``timeout``. Returns the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    else:
        # The leader is gone; children in its group may not be.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with _lock:
        _live.discard(proc)
    return proc.returncode


def stop_all() -> None:
    with _lock:
        procs = list(_live)
    for proc in procs:
        stop(proc, timeout=5)


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on {host}:{port} within {timeout}s")


def _on_signal(signum: int, _frame: object) -> None:
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(stop_all)


def install_signal_handlers() -> None:
    """Stop all children on SIGTERM/SIGHUP too (SIGINT raises KeyboardInterrupt, which unwinds)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signum, _on_signal)
