#!/usr/bin/env python3
"""Queue throughput: Trawl's queue against BullMQ, Dramatiq, Celery, RQ, arq and Huey, in one run.

Every system runs on the same freshly started redis-server (flushed between systems), on the same
machine, with the same number of worker processes (``--workers``, 2 by default) and, in the headline
rows, the same concurrency per process (``--concurrency``, 8 and 32): no-op tasks whose body makes its
own round trip (``INCR bench:done``, so the count is exact) and whose completion is its own round trip
(Trawl: the worker's claim sizing, then one ack per task, sent behind the task as the worker's finisher
sends it: the slot is free once the task's work is done, ``loadgen --ack-behind``). A last, labelled row
runs Trawl pipelined (a batch's INCRs in one pipeline, its acks in one call), which is not how the peers'
task APIs work.
Systems run in interleaved rounds (``--repeat``, 3 by default) and the medians are reported. Per system:

* tasks/s      -- completions per second between 2% and 100% of the tasks (worker start-up excluded);
* redis_us     -- Redis's own CPU time (INFO cpu: used_cpu_user + used_cpu_sys, all server threads)
                  over the same window, per task, in microseconds;
* worker_us    -- the worker processes' own CPU time (user + system, all threads and child processes,
                  from /proc) over the same window, per task: what a loaded machine makes scarce;
* bytes_pending -- Redis ``used_memory`` growth per task while enqueueing the second half of the tasks,
                  before any worker runs (less the script cache and client buffers, and without the
                  fixed cost of the queue's first use, which the first half pays).

Per concurrency the last line is ``ratio_vs_best_peer_c<N>=<Trawl tasks/s / the fastest peer's>``.

Enqueue: each run enqueues in two producer processes of half the tasks each (Trawl's as well), each with its
system's call for many tasks. The enqueue table gives per system (medians over all its runs) the tasks/s
inside the second producer's enqueue calls (per task), Redis CPU per task over that producer, the fixed cost
of a producer process (its wall time outside the enqueue calls: start, imports, connection, registration)
and the whole figure (all tasks / both producers' wall time); then ``enqueue_ratio_vs_best_peer`` and
``enqueue_whole_ratio_vs_best_peer``. ``--enqueue-only`` skips the workers.

    .venv/bin/python bench/queue_throughput.py            # 20,000 tasks, concurrency 8 and 32, 3 rounds
    .venv/bin/python bench/queue_throughput.py --quick    # 3,000 tasks, concurrency 8, one round
    .venv/bin/python bench/queue_throughput.py --tasks 20000 --enqueue-only --concurrency 8 --no-pipelined
    .venv/bin/python bench/queue_throughput.py --only trawl --tenants 100   # Trawl's tasks over 100 tenants' jobs

BullMQ is installed with npm into ~/.cache/trawl/bench-node (outside the repository) on first use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parent.parent
# The tree whose queue code enqueues (a baseline row's enqueue runs this script with its own tree here).
sys.path.insert(0, os.environ.get("TRAWL_BENCH_OPERATOR", str(REPO / "operator")))

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
    worker_us_per_task: float = 0.0
    bytes_per_pending: float = 0.0
    enqueue_s: float = 0.0
    enqueue_per_s: float = 0.0
    enqueue_whole_per_s: float = 0.0
    enqueue_fixed_s: float = 0.0
    enqueue_redis_us: float = 0.0
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
    enqueue: Callable[[int], Enqueued]
    workers: Callable[[int], list[list[str]]]  # worker index -> argv list
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = PEERS_DIR
    producer: str = ""  # how its producer enqueues many tasks (the bulk API its docs offer, or what stands in)


@dataclass
class Enqueued:
    """One producer process's enqueue: its whole wall time (process start, imports, connection, script
    load included) and the time spent inside the enqueue calls (what each further task costs)."""

    wall_s: float
    calls_s: float


ENQUEUE_MARK = "BENCH_ENQUEUE_CALLS_S="


def run_producer(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> Enqueued:
    """Run one producer process; it prints ``BENCH_ENQUEUE_CALLS_S=<seconds inside its enqueue calls>``."""
    t0 = time.perf_counter()
    out = subprocess.run(argv, cwd=cwd, env=env, check=True, timeout=600, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    calls = [line for line in out.splitlines() if line.startswith(ENQUEUE_MARK)]
    if not calls:
        raise RuntimeError(f"producer {argv[:3]} printed no {ENQUEUE_MARK}")
    return Enqueued(wall, float(calls[-1].removeprefix(ENQUEUE_MARK)))


def py_peer_enqueue(module: str, url: str) -> Callable[[int], Enqueued]:
    """A Python peer's producer: its module's ``enqueue(n)`` timed inside a fresh process (import excluded)."""

    def run(n: int) -> Enqueued:
        code = (
            f"import time, {module} as m; t = time.perf_counter(); m.enqueue({n}); "
            f"print('{ENQUEUE_MARK}%r' % (time.perf_counter() - t))"
        )
        return run_producer([PY, "-c", code], peer_env(url), PEERS_DIR)

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


def bullmq_enqueue(url: str) -> Callable[[int], Enqueued]:
    def run(n: int) -> Enqueued:
        ensure_bullmq()
        return run_producer(["node", str(PEERS_DIR / "bullmq_producer.cjs"), str(n)], peer_env(url))

    return run


def data_memory(r: redis.Redis) -> int:
    """used_memory less the script cache and client buffers: what the stored tasks cost."""
    info = r.info("memory")
    return int(info["used_memory"]) - int(info.get("used_memory_scripts", 0)) - int(info.get("mem_clients_normal", 0))


def trawl_enqueue(url: str, tenants: int = 0) -> Callable[[int], Enqueued]:
    """Trawl's producer, a process like the peers' (:func:`tree_enqueue` on this tree)."""
    return tree_enqueue(url, REPO, tenants)


def trawl_enqueue_here(url: str, n: int, tenants: int = 0) -> float:
    """Trawl's enqueue in this process: one job without a tenant, or (``tenants`` N > 0) the tasks spread
    evenly over N jobs ``bench-job-<i>`` of tenants ``t<i>`` (issue 33: the claim shares among tenants; no
    tenant policy is set, so each gets the default weight 1 and no quota). Returns the seconds spent inside
    ``Queue.enqueue`` (a job's registration and the client's set-up are the fixed cost)."""
    import redis.asyncio as aioredis

    from trawl.queue import JobConfig, Queue

    async def go() -> float:
        r = aioredis.Redis.from_url(url)
        calls = 0.0
        try:
            q = Queue(r, TRAWL_PREFIX)
            if not tenants:
                jobs = [("bench-job", JobConfig("bench-job"), n)]
            else:
                jobs = [
                    (f"bench-job-{i}", JobConfig(f"bench-job-{i}", tenant=f"t{i}"), n // tenants + (i < n % tenants))
                    for i in range(tenants)
                ]
            for job, config, count in jobs:
                # Seed indexes continue after what the job holds (enqueue is idempotent per index); 0 after a flush.
                first = (await q.job_stats(job)).total
                await q.register_job(config)
                urls = [f"https://bench.example/{job}/item/{i}" for i in range(first, first + count)]
                if urls:
                    t0 = time.perf_counter()
                    await q.enqueue(job, urls, start_index=first)
                    calls += time.perf_counter() - t0
        finally:
            await r.aclose()
        return calls

    return asyncio.run(go())


def trawl_loadgen_argv(url: str, i: int, *extra: str) -> list[str]:
    """One Trawl worker process of the benchmark (``trawl.queue.loadgen``), counting completions in DONE_KEY."""
    return [
        PY, "-m", "trawl.queue.loadgen", "--url", url, "--prefix", TRAWL_PREFIX, "--worker-id", f"bench-w{i}",
        "--mark-key", DONE_KEY, *extra,
    ]  # fmt: skip


def celery_argv(i: int, conc: str) -> list[str]:
    return [
        str(BIN / "celery"), "-A", "peer_celery", "worker", "-P", "threads", "-c", conc, "-Q", "bench",
        "-n", f"w{i}@bench", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING",
    ]  # fmt: skip


def tree_enqueue(url: str, tree: Path, tenants: int) -> Callable[[int], Enqueued]:
    """:func:`trawl_enqueue_here` in a producer process running ``tree``'s queue code (a baseline tree: its
    own Lua, where a job's tasks go may differ)."""

    def run(n: int) -> Enqueued:
        env = {**peer_env(url), "TRAWL_BENCH_OPERATOR": str(tree / "operator")}
        argv = [PY, str(Path(__file__).resolve()), "--trawl-enqueue", url, str(n), str(tenants)]
        return run_producer(argv, env)

    return run


def baseline_system(url: str, conc: int, tree: Path, claim_batch: str = "quarter", tenants: int = 0) -> System:
    """Trawl from another source tree (e.g. ``git archive <commit>``), by default with claims of a quarter of
    the concurrency as the worker made them before claim sizing (``claim_batch``: ``auto`` or a number for
    a tree that has claim sizing): the "before" row, run interleaved with the others."""
    size = str(max(1, conc // 4)) if claim_batch == "quarter" else claim_batch
    claims = f"claims of {size} (concurrency / 4)" if claim_batch == "quarter" else f"claim size {size}"
    return System(
        "trawl-baseline",
        f"Trawl from {tree} (not a peer; not in the ratio)",
        f"{conc} slots per process, {claims}",
        tree_enqueue(url, tree, tenants),
        lambda i: [trawl_loadgen_argv(url, i, "--concurrency", str(conc), "--claim-batch", size)],
        env={"PYTHONPATH": os.pathsep.join([str(PEERS_DIR), str(tree / "operator")])},
        producer=f"Queue.enqueue of {tree}",
    )


def systems(url: str, conc: int, only: set[str] | None, claim_batch: str = "auto", tenants: int = 0) -> list[System]:
    """Every system at ``conc`` tasks in flight per process, each task's INCR and completion its own round trip
    (conc 0: the pipelined Trawl row, which batches both)."""
    if conc == 0:
        out = [
            System(
                "trawl-pipelined",
                "as trawl, but a batch's INCRs go in one pipeline and its acks in one call (not a peer's way)",
                "2 loops x claims of 200 per process",
                trawl_enqueue(url, tenants),
                lambda i: [trawl_loadgen_argv(url, i, "--batch", "200", "--loops", "2")],
            )
        ]
        return [s for s in out if only is None or s.name in only or "trawl" in only]
    c = str(conc)
    out = [
        System(
            "trawl",
            "at-least-once: leases + heartbeats; each task acked on its own, its slot free before the ack's reply",
            f"{c} slots per process, claim size {claim_batch}, at most {c} acks in flight",
            trawl_enqueue(url, tenants),
            lambda i: [trawl_loadgen_argv(url, i, "--concurrency", c, "--claim-batch", claim_batch, "--ack-behind")],
            producer="Queue.enqueue: one script call per 2,000 URLs (enqueue_batch, the operator's)",
        ),
        System(
            "bullmq",
            "at-least-once: locks + stalled-job check; completion fetches the next job in the same call",
            f"concurrency {c} per process",
            bullmq_enqueue(url),
            lambda i: [["node", str(PEERS_DIR / "bullmq_worker.cjs")]],
            env={"BENCH_CONCURRENCY": c},
            producer="Queue.addBulk of 1,000 jobs (one MULTI of its add script per job)",
        ),
        System(
            "dramatiq",
            "at-least-once: ack after run, heartbeats, requeue of dead workers' messages",
            f"{c} threads per process, prefetch {2 * conc} (its default)",
            py_peer_enqueue("peer_dramatiq", url),
            lambda i: [
                [str(BIN / "dramatiq"), "peer_dramatiq", "--processes", "1", "--threads", c, "--queues", "bench"]
            ],
            producer="actor.send per message (no bulk API; group() sends one by one)",
        ),
        System(
            "celery",
            "acks_late (ack after run; unacked redelivered after the visibility timeout)",
            f"threads pool of {c} per process, prefetch multiplier 16",
            py_peer_enqueue("peer_celery", url),
            lambda i: [celery_argv(i, c)],
            producer="apply_async per task on one producer (no bulk API; chunks() would merge tasks)",
        ),
        System(
            "rq",
            "job moved to a started registry; abandoned jobs failed by the cleaner",
            "1 job at a time per process (RQ has no in-process concurrency; SimpleWorker, no fork)",
            py_peer_enqueue("peer_rq", url),
            lambda i: [[str(BIN / "rq"), "worker", "-w", "rq.worker.SimpleWorker", "-u", url, "bench", "-q"]],
            producer="Queue.enqueue_many of 1,000 in one pipeline",
        ),
        System(
            "arq",
            "at-least-once via in-progress keys and re-run of jobs whose worker died",
            f"max_jobs {c} per process, poll every 10 ms",
            py_peer_enqueue("peer_arq", url),
            lambda i: [[PY, "-c", "import peer_arq; peer_arq.run_worker()"]],
            env={"BENCH_CONCURRENCY": c},
            producer="enqueue_job per job, 500 at a time with asyncio.gather (no bulk API)",
        ),
        System(
            "huey",
            "at-most-once (task popped before it runs)",
            f"{c} worker threads per consumer process, blocking pop",
            py_peer_enqueue("peer_huey", url),
            lambda i: [[str(BIN / "huey_consumer"), "peer_huey.huey", "-k", "thread", "-w", c, "-q"]],
            producer="task.map(range(n)) (its bulk call: one enqueue per task)",
        ),
    ]
    return [s for s in out if only is None or s.name in only]


def tree_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system, all threads) of these processes and their live descendants (/proc)."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        rest = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid ... utime stime
        stats[int(entry)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _ticks) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, stack, seen = 0, list(pids), set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        stack += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run_system(
    system: System, server: RedisServer, tasks: int, workers: int, timeout: float, log_dir: Path, enqueue_only: bool
) -> Result:
    res = Result(system.name, tasks, semantics=system.semantics, concurrency=system.concurrency)
    r = redis.Redis.from_url(server.url)
    started: list[subprocess.Popen[bytes]] = []
    try:
        r.flushall()
        time.sleep(0.2)
        # Two halves: the second half's growth is the cost per pending task, without the fixed cost of a
        # queue's first use (scripts, bookkeeping keys) that the first half pays.
        # Each half is one producer process. The second half's time inside the enqueue calls is the
        # per-task figure (the queue exists, the server has the scripts); what each process spends outside
        # them (start, imports, connection, a job's registration) is the fixed cost.
        half = tasks // 2
        first = system.enqueue(half)
        mem1, cpu1 = data_memory(r), redis_cpu(r)
        second = system.enqueue(tasks - half)
        cpu2 = redis_cpu(r)
        res.enqueue_s = first.wall_s + second.wall_s
        res.enqueue_whole_per_s = tasks / res.enqueue_s
        res.enqueue_per_s = (tasks - half) / second.calls_s if second.calls_s > 0 else 0.0
        res.enqueue_fixed_s = (first.wall_s - first.calls_s + second.wall_s - second.calls_s) / 2
        res.enqueue_redis_us = (cpu2 - cpu1) * 1e6 / (tasks - half)
        res.bytes_per_pending = (data_memory(r) - mem1) / (tasks - half)
        if enqueue_only:
            return res
        r.config_resetstat()
        for i in range(workers):
            for argv in system.workers(i):
                started.append(
                    procs.start(
                        argv,
                        log_path=log_dir / f"{system.name}-{i}.log",
                        env={**peer_env(server.url), **system.env},
                        cwd=system.cwd,
                    )
                )
        start_at = max(1, tasks // 50)
        deadline = time.monotonic() + timeout
        t_start = cpu_start = None
        wcpu_start = 0.0
        n_start = 0
        done = 0
        while time.monotonic() < deadline:
            done = int(r.get(DONE_KEY) or 0)
            if t_start is None and done >= start_at:
                t_start, cpu_start, n_start = time.perf_counter(), redis_cpu(r), done
                wcpu_start = tree_cpu([p.pid for p in started])
            if done >= tasks:
                break
            for p in started:
                if p.poll() is not None:
                    raise RuntimeError(f"worker exited with {p.returncode}; see {log_dir}/{system.name}-*.log")
            time.sleep(0.005)
        t_end, cpu_end = time.perf_counter(), redis_cpu(r)
        wcpu_end = tree_cpu([p.pid for p in started])
        res.completed = done
        if t_start is None or cpu_start is None:
            raise RuntimeError(f"only {done} of {tasks} tasks completed within {timeout:.0f}s")
        if done < tasks:
            res.note = f"rate over a partial run: {done}/{tasks} done in the {timeout:.0f}s limit"
        n = done - n_start
        if n <= 0:  # every task was done by the first poll that saw any: no window to measure over
            raise RuntimeError(f"all {done} tasks were done before the measurement window opened: use more tasks")
        elapsed = t_end - t_start
        res.tasks_per_s = n / elapsed if elapsed > 0 else 0.0
        res.redis_us_per_task = (cpu_end - cpu_start) * 1e6 / n if n > 0 else 0.0
        res.worker_us_per_task = (wcpu_end - wcpu_start) * 1e6 / n if n > 0 else 0.0
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


def median_result(runs: list[Result]) -> Result:
    """The run with the median tasks/s; its Redis µs/task and bytes/pending are the medians of all runs."""
    ok = [r for r in runs if r.tasks_per_s > 0 and not r.error]
    if not ok:
        return runs[-1]
    ok.sort(key=lambda r: r.tasks_per_s)
    mid = replace(ok[len(ok) // 2])
    mid.redis_us_per_task = statistics.median(r.redis_us_per_task for r in ok)
    mid.bytes_per_pending = statistics.median(r.bytes_per_pending for r in ok)
    mid.worker_us_per_task = statistics.median(r.worker_us_per_task for r in ok)
    for name in ("enqueue_per_s", "enqueue_whole_per_s", "enqueue_fixed_s", "enqueue_redis_us"):
        setattr(mid, name, statistics.median(getattr(r, name) for r in ok))
    mid.note = " ".join(
        x for x in (mid.note, f"median of {len(ok)}: " + "/".join(f"{r.tasks_per_s:.0f}" for r in ok)) if x
    )
    return mid


def print_enqueue(runs: dict[tuple[int, str], list[Result]], producers: dict[str, str]) -> int:
    """The enqueue table: every run of a system enqueues (two producer processes of half the tasks each),
    so its figures are the medians over all its runs, whatever the concurrency."""
    by_system: dict[str, list[Result]] = {}
    for (_conc, name), rs in runs.items():
        by_system.setdefault(name, []).extend(r for r in rs if r.enqueue_per_s > 0)
    print("\n## enqueue (two producer processes of half the tasks each; medians over every run of the system)")
    print(
        f"{'system':16s} {'per_task/s':>11s} {'redis_us/task':>14s} {'fixed_s/proc':>13s} {'whole/s':>9s}"
        "  producer (per_task: the second process's tasks / its time inside the enqueue calls)"
    )
    med: dict[str, dict[str, float]] = {}
    for name, rs in by_system.items():
        if not rs:
            print(f"{name:16s} {'-':>11s} {'-':>14s} {'-':>13s} {'-':>9s}  no enqueue measured")
            continue
        fig = {k: statistics.median(getattr(r, k) for r in rs) for k in ENQUEUE_FIGURES}
        med[name] = fig
        print(
            f"{name:16s} {fig['enqueue_per_s']:11.0f} {fig['enqueue_redis_us']:14.2f} {fig['enqueue_fixed_s']:13.3f}"
            f" {fig['enqueue_whole_per_s']:9.0f}  {producers.get(name, '')} ({len(rs)} runs)"
        )
    peers = {n: f for n, f in med.items() if not n.startswith("trawl")}
    if "trawl" not in med or not peers:
        return 0 if "trawl" not in by_system else 1
    for figure, label in (
        ("enqueue_per_s", "enqueue_ratio_vs_best_peer"),
        ("enqueue_whole_per_s", "enqueue_whole_ratio_vs_best_peer"),
    ):
        best = max(peers, key=lambda n: peers[n][figure])
        print(f"{label}={med['trawl'][figure] / peers[best][figure]:.2f} (best peer: {best})")
    return 0


ENQUEUE_FIGURES = ("enqueue_per_s", "enqueue_redis_us", "enqueue_fixed_s", "enqueue_whole_per_s")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    if sys.argv[1:2] == ["--trawl-enqueue"]:  # a baseline tree's enqueue (see tree_enqueue)
        url, n, tenants = sys.argv[2:5]
        print(f"{ENQUEUE_MARK}{trawl_enqueue_here(url, int(n), int(tenants))!r}")
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3,000 tasks, a 10 s run limit, concurrency 8, one round")
    ap.add_argument("--tasks", type=int, default=0, help="tasks per system and run (20,000; --quick: 3,000)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes per system")
    ap.add_argument("--concurrency", default="", help="comma-separated tasks in flight per process (default 8,32)")
    ap.add_argument("--repeat", type=int, default=0, help="interleaved rounds; medians are reported (default 3)")
    ap.add_argument("--claim-batch", default="auto", help="Trawl's claim size: auto or a number")
    ap.add_argument("--no-pipelined", action="store_true", help="leave out the pipelined Trawl row")
    ap.add_argument("--baseline", default="", help="also run Trawl from this source tree (a 'before' row)")
    ap.add_argument(
        "--baseline-claim-batch",
        default="quarter",
        help="the baseline's claim size: quarter (concurrency / 4, before claim sizing), auto or a number",
    )
    ap.add_argument("--only", default="", help="comma-separated systems to run (default: all)")
    ap.add_argument(
        "--tenants",
        type=int,
        default=0,
        help="Trawl rows only: spread the tasks over N jobs of N tenants t0..t<N-1> (default 0: one job, no tenant)",
    )
    ap.add_argument(
        "--enqueue-only", action="store_true", help="only the enqueue (no workers): the enqueue table, every peer"
    )
    ap.add_argument("--json", default="", help="also write the results to this JSON file")
    args = ap.parse_args()
    tasks = args.tasks or (3000 if args.quick else 20000)
    timeout = 10.0 if args.quick else 120.0
    concs = [int(c) for c in (args.concurrency or ("8" if args.quick else "8,32")).split(",")]
    repeat = args.repeat or (1 if args.quick else 3)
    only = set(args.only.split(",")) if args.only else None
    procs.install_signal_handlers()
    runs: dict[tuple[int, str], list[Result]] = {}
    # The worker processes' logs: removed at the end unless a run failed (then they say why).
    log_dir = Path(tempfile.mkdtemp(prefix="trawl-bench-"))
    t0 = time.perf_counter()
    load_before = load_average()
    with RedisServer() as server:
        plan = [(c, s) for c in concs for s in systems(server.url, c, only, args.claim_batch, args.tenants)]
        if args.baseline:
            tree = Path(args.baseline).resolve()
            plan += [(c, baseline_system(server.url, c, tree, args.baseline_claim_batch, args.tenants)) for c in concs]
        if not args.no_pipelined:
            plan += [(0, s) for s in systems(server.url, 0, only, tenants=args.tenants)]
        for rnd in range(repeat):
            # Interleaved: every system once per round, so a burst of load from elsewhere hits them all alike;
            # each round starts one system later, so none always runs first (or right after the same one).
            shift = rnd % len(plan)
            for conc, system in plan[shift:] + plan[:shift]:
                res = run_system(system, server, tasks, args.workers, timeout, log_dir, args.enqueue_only)
                res.concurrency = system.concurrency
                runs.setdefault((conc, system.name), []).append(res)
                print(
                    f"# round {rnd + 1} c={conc or 'pipelined'} {res.system:15s} {res.tasks_per_s:9.0f} tasks/s "
                    f"{res.redis_us_per_task:7.1f} us/task (redis) {res.worker_us_per_task:7.1f} us/task (workers) "
                    f"{res.bytes_per_pending:7.0f} B/pending enqueue {res.enqueue_per_s:8.0f}/s per task "
                    f"{res.enqueue_fixed_s:5.2f}s fixed "
                    f"load {load_average()} {res.error or res.note}",
                    file=sys.stderr,
                    flush=True,
                )
    results = {key: median_result(rs) for key, rs in runs.items()}
    producers = {s.name: s.producer for _c, s in plan}
    print(
        f"queue throughput: {tasks} no-op tasks per system and run, {args.workers} worker processes each, one "
        f"redis-server, {repeat} interleaved round(s), medians ({time.perf_counter() - t0:.0f}s); "
        + (f"Trawl's tasks over {args.tenants} jobs of as many tenants; " if args.tenants else "")
        + f"load average {load_before} before, {load_average()} after, {os.cpu_count()} CPUs"
    )
    status = 0
    for conc in [] if args.enqueue_only else [*concs, 0]:
        rows = [(name, r) for (c, name), r in results.items() if c == conc]
        if not rows:
            continue
        title = (
            f"concurrency {conc} per process; each task's INCR and its completion are their own round trips"
            if conc
            else "pipelined (not a peer's way: a batch's INCRs in one pipeline, its acks in one call)"
        )
        print(f"\n## {title}")
        print(
            f"{'system':16s} {'tasks/s':>9s} {'redis_us/task':>14s} {'worker_us/task':>15s} {'bytes/pending':>14s}"
            "  concurrency; semantics"
        )
        for name, res in rows:
            if res.error and not res.tasks_per_s:
                print(f"{name:16s} {'-':>9s} {'-':>14s} {'-':>15s} {'-':>14s}  FAILED: {res.error}")
                continue
            note = f"  [{res.error or res.note}]" if (res.error or res.note) else ""
            print(
                f"{name:16s} {res.tasks_per_s:9.0f} {res.redis_us_per_task:14.1f} {res.worker_us_per_task:15.1f}"
                f" {res.bytes_per_pending:14.0f}"
                f"  {res.concurrency}; {res.semantics}{note}"
            )
        if not conc:
            continue
        trawl = results.get((conc, "trawl"))
        peers = [r for (c, n), r in results.items() if c == conc and not n.startswith("trawl") and r.tasks_per_s > 0]
        if trawl is None or not peers or not trawl.tasks_per_s:
            print(f"ratio_vs_best_peer_c{conc}=nan")
            status = 1
            continue
        best = max(peers, key=lambda r: r.tasks_per_s)
        print(f"best peer at concurrency {conc}: {best.system} ({best.tasks_per_s:.0f} tasks/s)")
        print(f"ratio_vs_best_peer_c{conc}={trawl.tasks_per_s / best.tasks_per_s:.2f}")
        base = results.get((conc, "trawl-baseline"))
        if base is not None and base.tasks_per_s:
            print(f"baseline_ratio_vs_best_peer_c{conc}={base.tasks_per_s / best.tasks_per_s:.2f}")
    status |= print_enqueue(runs, producers)
    if args.json:
        Path(args.json).write_text(json.dumps([{"conc": c, **asdict(r)} for (c, _n), r in results.items()], indent=2))
    failed = [r.system for rs in runs.values() for r in rs if r.error and not r.tasks_per_s]
    if failed:
        print(f"worker logs of the failed runs ({', '.join(sorted(set(failed)))}) kept in {log_dir}", file=sys.stderr)
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
