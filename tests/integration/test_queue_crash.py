"""Crash test: worker processes claiming 10,000 tasks are killed with SIGKILL at random moments. In the
end every task succeeded exactly once, has a result, and only tasks in flight at a kill ran twice."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import redis.asyncio as aioredis

from trawl.dev import procs
from trawl.dev.redis_server import RedisServer
from trawl.queue import JobConfig, Queue
from worker_procs import start_loadgen

PREFIX = "trawl:{crash/pool}"
TASKS = 10_000
RESULTS = "crash:results"
CLAIMS = "crash:claims"


LOADGEN = {
    "batch": 25,
    "task_seconds": 0.04,
    "lease": 2,
    "max_stalls": 1000,
    "results_key": RESULTS,
    "claims_key": CLAIMS,
}


async def test_sigkilled_workers_lose_nothing(
    redis_server: RedisServer, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    rng = random.Random(1234)
    q = Queue(redis_client, PREFIX, lease_seconds=2, max_stalls=1000)
    await q.register_job(JobConfig("crash-job"))
    assert await q.enqueue("crash-job", [f"https://c.example/{i}" for i in range(TASKS)]) == TASKS
    await q.mark_enqueue_done("crash-job")

    live: dict[str, subprocess.Popen[bytes]] = {}
    killed: set[str] = set()
    incarnation = 0
    try:
        for _ in range(3):
            incarnation += 1
            live[f"w{incarnation}"] = start_loadgen(redis_server.url, PREFIX, f"w{incarnation}", tmp_path, **LOADGEN)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            stats = await q.job_stats("crash-job")
            if stats.finished:
                break
            if len(killed) < 8 and stats.succeeded > 300:
                await asyncio.sleep(rng.uniform(0.05, 0.4))
                victim = rng.choice(sorted(live))
                procs.stop(live.pop(victim), sig=signal.SIGKILL)
                killed.add(victim)
                incarnation += 1
                live[f"w{incarnation}"] = start_loadgen(
                    redis_server.url, PREFIX, f"w{incarnation}", tmp_path, **LOADGEN
                )
            else:
                await asyncio.sleep(0.1)
        stats = await q.job_stats("crash-job")
    finally:
        for proc in live.values():
            procs.stop(proc)

    assert len(killed) == 8, f"only {len(killed)} kills before the job finished"
    assert stats.finished, stats
    assert (stats.succeeded, stats.dead, stats.pending, stats.in_flight) == (TASKS, 0, 0, 0)
    # Every task has exactly one result (keyed by job and task)...
    assert await redis_client.hlen(RESULTS) == TASKS
    # ...and only tasks claimed by a killed worker ran more than once.
    log = [e.decode().split(" ") for e in await redis_client.lrange(f"{RESULTS}:log", 0, -1)]
    runs = Counter(tid for tid, _ in log)
    assert set(runs) == {f"crash-job|{i}" for i in range(1, TASKS + 1)}
    claimed_by_killed: set[str] = set()
    for w in killed:
        claimed_by_killed.update(e.decode() for e in await redis_client.lrange(f"{CLAIMS}:{w}", 0, -1))
    repeated = {tid for tid, n in runs.items() if n > 1}
    assert repeated <= claimed_by_killed
    for tid in repeated:
        by_survivors = [w for t, w in log if t == tid and w not in killed]
        assert len(by_survivors) <= 1, (tid, by_survivors)
    signals = await q.pool_signals()
    assert signals.completed_total == TASKS
    assert sum(1 for _, e in await q.events() if e["type"] == "workerlost") >= 1
