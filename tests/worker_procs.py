"""Worker processes for the tests that run real ones: `trawl worker` (:func:`start_worker`) and the queue's
load generator (:func:`start_loadgen`), each with its output in a log file. A process started into the
``workers`` fixture's list (tests/conftest.py) is stopped at the end of the test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from trawl.dev import procs


def start_worker(
    started: list[subprocess.Popen[bytes]],
    redis_args: Sequence[str],
    prefix: str,
    name: str,
    log_dir: Path,
    *,
    allowed: str = "127.0.0.2/32",
    lease: float | str = 10,
    concurrency: int = 8,
    drain: float | None = 5,
    parse_processes: int | None = None,
    metrics_port: int | None = None,
    env: dict[str, str] | None = None,
    log_name: str | None = None,
) -> subprocess.Popen[bytes]:
    """`trawl worker` as ``name`` on the Redis that ``redis_args`` name (``--redis-url URL`` and the like) and
    the pool ``prefix``, fetching from ``allowed`` only; appended to ``started``. ``drain`` None leaves
    ``--drain-seconds`` out, ``parse_processes`` and ``metrics_port`` None leave theirs out (the worker's
    defaults); a metrics port listens on 127.0.0.1. Its log is ``log_dir/<log_name or name>.log``."""
    argv = [
        sys.executable, "-m", "trawl.cli", "worker", *redis_args, "--prefix", prefix, "--allowed-cidrs", allowed,
        "--worker-id", name, "--lease-seconds", str(lease), "--concurrency", str(concurrency),
    ]  # fmt: skip
    if drain is not None:
        argv += ["--drain-seconds", str(drain)]
    if parse_processes is not None:
        argv += ["--parse-processes", str(parse_processes)]
    if metrics_port is not None:
        argv += ["--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1"]
    proc = procs.start(argv, log_path=log_dir / f"{log_name or name}.log", env=env)
    started.append(proc)
    return proc


def start_loadgen(
    redis_url: str,
    prefix: str,
    worker_id: str,
    log_dir: Path,
    *,
    batch: int,
    task_seconds: float,
    lease: float,
    max_stalls: int,
    results_key: str,
    claims_key: str,
) -> subprocess.Popen[bytes]:
    """A stand-in worker (``trawl.queue.loadgen``): claims ``batch`` tasks at a time, runs each for
    ``task_seconds``, records each run in ``results_key`` and its claims in ``claims_key``."""
    argv = [
        sys.executable, "-m", "trawl.queue.loadgen", "--url", redis_url, "--prefix", prefix,
        "--worker-id", worker_id, "--batch", str(batch), "--task-seconds", str(task_seconds),
        "--lease", str(lease), "--max-stalls", str(max_stalls),
        "--results-key", results_key, "--claims-key", claims_key,
    ]  # fmt: skip
    return procs.start(argv, log_path=log_dir / f"{worker_id}.log")
