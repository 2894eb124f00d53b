#!/usr/bin/env python3
"""Queue throughput: Trawl's queue against Dramatiq, Celery, RQ, arq, Huey and BullMQ, in one run.

Every system runs on the same freshly started redis-server (flushed between systems), on the same
machine, with the same number of worker processes (``--workers``, 2 by default), no-op tasks that each
mark their own completion in Redis (``INCR bench:done``, so the count is exact). For each system:

* tasks/s      -- completions per second between 2% and 100% of the tasks (worker start-up excluded);
* redis_us     -- Redis's own CPU time (INFO cpu: used_cpu_user + used_cpu_sys, all server threads)
                  over the same window, per task, in microseconds;
* bytes_pending -- Redis ``used_memory`` growth per task while enqueueing the second half of the tasks,
                  before any worker runs (less the script cache and client buffers, and without the
                  fixed cost of the queue's first use, which the first half pays).

The last line is ``ratio_vs_best_peer=<Trawl tasks/s / the fastest peer's tasks/s>``.

    .venv/bin/python bench/queue_throughput.py            # 20,000 tasks per system
    .venv/bin/python bench/queue_throughput.py --quick    # 3,000 tasks per system, under two minutes

BullMQ is installed with npm into ~/.cache/trawl/bench-node (outside the repository) on first use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "operator"))

from trawl.dev import procs  # noqa: E402
from trawl.dev.redis_server import RedisServer  # noqa: E402

PEERS_DIR = REPO / "bench" / "peers"
NODE_DIR = Path(os.environ.get("TRAWL_BENCH_NODE_DIR", Path.home() / ".cache" / "trawl" / "bench-node"))
BULLMQ_VERSION = "5"
DONE_KEY = "bench:done"
TRAWL_PREFIX = "trawl:{bench/pool}"
PY = sys.executable
BIN = Path(sys.executable).parent


@dataclass
class Result:
    system: str
    tasks: int
    completed: int = 0
    tasks_per_s: float = 0.0
    redis_us_per_task: float = 0.0
    bytes_per_pending: float = 0.0
    enqueue_s: float = 0.0
    semantics: str = ""
    concurrency: str = ""
    error: str = ""
    note: str = ""
    top_commands: list[str] = field(default_factory=list)


@dataclass
class System:
    name: str
    semantics: str
    concurrency: str
    enqueue: Callable[[int], None]
    workers: Callable[[int], list[list[str]]]  # worker index -> argv list
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = PEERS_DIR


def py_peer_enqueue(module: str, url: str) -> Callable[[int], None]:
    def run(n: int) -> None:
        code = f"import {module} as m; m.enqueue({n})"
        subprocess.run([PY, "-c", code], cwd=PEERS_DIR, env=peer_env(url), check=True, timeout=600)

    return run


def peer_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["BENCH_REDIS_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(PEERS_DIR), str(REPO / "operator")])
    env["NODE_PATH"] = str(NODE_DIR / "node_modules")
    env.pop("PYTHONSTARTUP", None)
    return env


def ensure_bullmq() -> None:
    if (NODE_DIR / "node_modules" / "bullmq" / "package.json").exists():
        return
    if shutil.which("npm") is None:
        raise RuntimeError("npm not found: BullMQ cannot be installed")
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    pkg = NODE_DIR / "package.json"
    if not pkg.exists():
        pkg.write_text('{"name": "trawl-bench-node", "private": true}\n')
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", f"bullmq@{BULLMQ_VERSION}"], cwd=NODE_DIR, check=True, timeout=600
    )


def bullmq_enqueue(url: str) -> Callable[[int], None]:
    def run(n: int) -> None:
        ensure_bullmq()
        producer = ["node", str(PEERS_DIR / "bullmq_producer.cjs"), str(n)]
        subprocess.run(producer, env=peer_env(url), check=True, timeout=600)

    return run


def data_memory(r: redis.Redis) -> int:
    """used_memory less the script cache and client buffers: what the stored tasks cost."""
    info = r.info("memory")
    return int(info["used_memory"]) - int(info.get("used_memory_scripts", 0)) - int(info.get("mem_clients_normal", 0))


def trawl_enqueue(url: str) -> Callable[[int], None]:
    offset = [0]  # seed indexes continue across calls (enqueue is idempotent per index)

    def run(n: int) -> None:
        import redis.asyncio as aioredis

        from trawl.queue import JobConfig, Queue

        async def go() -> None:
            r = aioredis.Redis.from_url(url)
            try:
                q = Queue(r, TRAWL_PREFIX, enqueue_batch=5000)
                await q.register_job(JobConfig("bench-job"))
                first = offset[0]
                urls = [f"https://bench.example/item/{i}" for i in range(first, first + n)]
                await q.enqueue("bench-job", urls, start_index=first)
                offset[0] += n
            finally:
                await r.aclose()

        asyncio.run(go())

    return run


def trawl_loadgen_argv(url: str, i: int, *extra: str) -> list[str]:
    """One Trawl worker process of the benchmark: 2 claim loops, batches of 200, completion marks."""
    return [
        PY, "-m", "trawl.queue.loadgen", "--url", url, "--prefix", TRAWL_PREFIX, "--worker-id", f"bench-w{i}",
        "--batch", "200", "--loops", "2", "--mark-key", DONE_KEY, *extra,
    ]  # fmt: skip


def systems(url: str, workers: int, only: set[str] | None) -> list[System]:
    out = [
        System(
            "trawl",
            "at-least-once: leases + heartbeats, batch claim, batch ack",
            "2 loops x batch 200 per process",
            trawl_enqueue(url),
            lambda i: [trawl_loadgen_argv(url, i)],
        ),
        System(
            "trawl-rt",
            "as trawl, but each task's INCR is its own round trip (not a peer; not in the ratio)",
            "2 loops x batch 200 per process",
            trawl_enqueue(url),
            lambda i: [trawl_loadgen_argv(url, i, "--mark-roundtrip")],
        ),
        System(
            "bullmq",
            "at-least-once: locks + stalled-job check",
            "concurrency 200 per process",
            bullmq_enqueue(url),
            lambda i: [["node", str(PEERS_DIR / "bullmq_worker.cjs")]],
        ),
        System(
            "dramatiq",
            "at-least-once: ack after run, heartbeats, requeue of dead workers' messages",
            "8 threads per process",
            py_peer_enqueue("peer_dramatiq", url),
            lambda i: [
                [str(BIN / "dramatiq"), "peer_dramatiq", "--processes", "1", "--threads", "8", "--queues", "bench"]
            ],
        ),
        System(
            "celery",
            "acks_late (ack after run; unacked redelivered after the visibility timeout)",
            "solo pool (tasks run in the worker process), prefetch 16",
            py_peer_enqueue("peer_celery", url),
            lambda i: [
                [
                    str(BIN / "celery"),
                    "-A",
                    "peer_celery",
                    "worker",
                    "-P",
                    "solo",
                    "-Q",
                    "bench",
                    "-n",
                    f"w{i}@bench",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-l",
                    "WARNING",
                ]
            ],
        ),
        System(
            "rq",
            "job moved to a started registry; abandoned jobs failed by the cleaner",
            "SimpleWorker, 1 job at a time per process",
            py_peer_enqueue("peer_rq", url),
            lambda i: [[str(BIN / "rq"), "worker", "-w", "rq.worker.SimpleWorker", "-u", url, "bench", "-q"]],
        ),
        System(
            "arq",
            "at-least-once via in-progress keys and re-run of jobs whose worker died",
            "max_jobs 200 per process",
            py_peer_enqueue("peer_arq", url),
            lambda i: [[PY, "-c", "import peer_arq; peer_arq.run_worker()"]],
        ),
        System(
            "huey",
            "at-most-once (task popped before it runs)",
            "1 worker per consumer process",
            py_peer_enqueue("peer_huey", url),
            lambda i: [[str(BIN / "huey_consumer"), "peer_huey.huey", "-k", "thread", "-w", "1", "-q"]],
        ),
    ]
    return [s for s in out if only is None or s.name in only]


def redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run_system(system: System, server: RedisServer, tasks: int, workers: int, timeout: float, log_dir: Path) -> Result:
    res = Result(system.name, tasks, semantics=system.semantics, concurrency=system.concurrency)
    r = redis.Redis.from_url(server.url)
    started: list[subprocess.Popen[bytes]] = []
    try:
        r.flushall()
        time.sleep(0.2)
        # Two halves: the second half's growth is the cost per pending task, without the fixed cost of a
        # queue's first use (scripts, bookkeeping keys) that the first half pays.
        half = tasks // 2
        t0 = time.perf_counter()
        system.enqueue(half)
        mem1 = data_memory(r)
        system.enqueue(tasks - half)
        res.enqueue_s = time.perf_counter() - t0
        res.bytes_per_pending = (data_memory(r) - mem1) / (tasks - half)
        r.config_resetstat()
        for i in range(workers):
            for argv in system.workers(i):
                started.append(
                    procs.start(
                        argv, log_path=log_dir / f"{system.name}-{i}.log", env=peer_env(server.url), cwd=system.cwd
                    )
                )
        start_at = max(1, tasks // 50)
        deadline = time.monotonic() + timeout
        t_start = cpu_start = None
        n_start = 0
        done = 0
        while time.monotonic() < deadline:
            done = int(r.get(DONE_KEY) or 0)
            if t_start is None and done >= start_at:
                t_start, cpu_start, n_start = time.perf_counter(), redis_cpu(r), done
            if done >= tasks:
                break
            for p in started:
                if p.poll() is not None:
                    raise RuntimeError(f"worker exited with {p.returncode}; see {log_dir}/{system.name}-*.log")
            time.sleep(0.005)
        t_end, cpu_end = time.perf_counter(), redis_cpu(r)
        res.completed = done
        if t_start is None or cpu_start is None:
            raise RuntimeError(f"only {done} of {tasks} tasks completed within {timeout:.0f}s")
        if done < tasks:
            res.note = f"rate over a partial run: {done}/{tasks} done in the {timeout:.0f}s limit"
        n = done - n_start
        elapsed = t_end - t_start
        res.tasks_per_s = n / elapsed if elapsed > 0 else 0.0
        res.redis_us_per_task = (cpu_end - cpu_start) * 1e6 / n if n > 0 else 0.0
        stats = r.info("commandstats")
        top = sorted(stats.items(), key=lambda kv: -float(kv[1]["usec"]))[:4]
        res.top_commands = [f"{k.removeprefix('cmdstat_')}:{v['calls']}" for k, v in top]
    except Exception as exc:  # a peer that cannot run is reported, not fatal
        res.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        for p in started:
            procs.stop(p, timeout=10)
        r.close()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="3,000 tasks and a 10 s run limit per system (under two minutes)"
    )
    ap.add_argument("--tasks", type=int, default=0, help="tasks per system (default 20,000; 3,000 with --quick)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes per system")
    ap.add_argument("--only", default="", help="comma-separated systems to run (default: all)")
    ap.add_argument("--json", default="", help="also write the results to this JSON file")
    args = ap.parse_args()
    tasks = args.tasks or (3000 if args.quick else 20000)
    timeout = 10.0 if args.quick else 120.0
    only = set(args.only.split(",")) if args.only else None
    procs.install_signal_handlers()
    results: list[Result] = []
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"trawl-bench-{os.getpid()}"
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with RedisServer() as server:
        for system in systems(server.url, args.workers, only):
            res = run_system(system, server, tasks, args.workers, timeout, log_dir)
            results.append(res)
            print(
                f"# {res.system:9s} {res.tasks_per_s:9.0f} tasks/s {res.redis_us_per_task:7.1f} us/task "
                f"{res.bytes_per_pending:7.0f} B/pending {res.error or res.note}",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"queue throughput: {tasks} no-op tasks per system, {args.workers} worker processes each, "
        f"one redis-server ({time.perf_counter() - t0:.0f}s)"
    )
    print(f"{'system':10s} {'tasks/s':>9s} {'redis_us/task':>14s} {'bytes/pending':>14s}  concurrency; semantics")
    for res in results:
        if res.error and not res.tasks_per_s:
            print(f"{res.system:10s} {'-':>9s} {'-':>14s} {'-':>14s}  FAILED: {res.error}")
            continue
        note = f"  [{res.error or res.note}]" if (res.error or res.note) else ""
        print(
            f"{res.system:10s} {res.tasks_per_s:9.0f} {res.redis_us_per_task:14.1f} {res.bytes_per_pending:14.0f}"
            f"  {res.concurrency}; {res.semantics}{note}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2))
    trawl = next((r for r in results if r.system == "trawl"), None)
    peers = [r for r in results if not r.system.startswith("trawl") and r.tasks_per_s > 0 and not r.error]
    if trawl is None or not peers or trawl.error:
        print("ratio_vs_best_peer=nan")
        return 1
    best = max(peers, key=lambda r: r.tasks_per_s)
    print(f"best peer: {best.system} ({best.tasks_per_s:.0f} tasks/s)")
    print(f"ratio_vs_best_peer={trawl.tasks_per_s / best.tasks_per_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
