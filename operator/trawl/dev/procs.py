"""Starting and reliably stopping helper processes.

Every process is started in its own session (process group) so it can be stopped with its
children, and is registered so an ``atexit`` hook and signal handlers stop it even when a test
fails or the run is interrupted: a test run must never leave etcd, an API server or Redis behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_live: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None
try:  # Resolved before any fork: the child must not dlopen between fork and exec.
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: SIGKILL it when the parent dies, even by SIGKILL."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free right now. Two :func:`free_port` calls in a row may return the
    same port (the first is released before the second bind), which once gave an operator the same
    health and metrics port; holding every socket until all are picked rules that out."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def start(
    argv: Sequence[str],
    *,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = True,
    bind_to_thread: bool = False,
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start a process in a new session, logging to ``log_path`` (or discarding output).

    With ``die_with_parent`` (Linux) the kernel SIGKILLs the process when this Python process
    dies, however it dies (SIGKILL included), so no server outlives a killed test run. The
    kernel ties this to the *thread* that started the child, so it is only armed when called
    from the main thread: a worker thread that exits would otherwise take the server with it.
    ``bind_to_thread`` arms it from any thread, for callers whose thread outlives its children
    (the worker supervisor stops its workers before its thread ends). ``user`` runs the child as that
    account (servers such as postgres refuse root); Popen switches users before the death signal is
    armed, so the switch does not clear it.
    """
    preexec: Callable[[], None] | None = None
    on_main = threading.current_thread() is threading.main_thread()
    if die_with_parent and _prctl is not None and (on_main or bind_to_thread):
        preexec = functools.partial(_die_with_parent, os.getpid())

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
            preexec_fn=preexec,
            user=user,
        )
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]
    with _lock:
        _live.add(proc)
    pid_file = os.environ.get("TRAWL_PIDS_FILE")
    if pid_file:
        # Lets a test prove afterwards that everything started here has stopped.
        with open(pid_file, "a") as fh:
            fh.write(f"{proc.pid}\n")
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


def forget(proc: subprocess.Popen[bytes]) -> None:
    """Stop tracking a process: it is meant to outlive this one (``trawl dev up --keep``)."""
    with _lock:
        _live.discard(proc)


def signal_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Send a signal to the process group without waiting (e.g. SIGTERM to start a drain)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


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
