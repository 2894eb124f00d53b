"""The load generator's slots (``trawl.queue.loadgen --concurrency N``), which the queue benchmark runs:
with ``--ack-behind`` a slot is free once its task's work is done, its ack going out behind it, at most N
acks in flight; every task is still acked, once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from trawl.dev.redis_server import RedisServer
from trawl.queue import JobConfig, Queue, loadgen
from trawl.queue.model import Task

PREFIX = "trawl:{loadgen/pool}"
MARKS = "loadgen:done"
TASKS = 40


async def until(check: Any, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def marks(r: aioredis.Redis) -> int:
    return int(await r.get(MARKS) or 0)


@pytest.mark.parametrize("behind", [False, True])
async def test_slots_hold_or_free_their_place_while_acks_wait(
    redis_server: RedisServer, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, behind: bool
) -> None:
    q = Queue(redis_client, PREFIX)
    await q.register_job(JobConfig("lg-job"))
    await q.enqueue("lg-job", [f"https://lg.example/{i}" for i in range(TASKS)])
    await q.mark_enqueue_done("lg-job")

    gate = asyncio.Event()
    calls = 0
    real_ack = Queue.ack

    async def gated_ack(self: Queue, task: Task, worker_id: str) -> bool:
        nonlocal calls
        calls += 1
        await gate.wait()
        return await real_ack(self, task, worker_id)

    monkeypatch.setattr(Queue, "ack", gated_ack)
    conc = 2
    argv = ["--url", redis_server.url, "--prefix", PREFIX, "--worker-id", "lg-w", "--mark-key", MARKS]
    argv += ["--concurrency", str(conc), "--idle-exit", "0.2", *(["--ack-behind"] if behind else [])]
    run = asyncio.create_task(loadgen.run(loadgen.parse_args(argv)))
    try:
        # While no ack is answered: held slots stop at `conc` tasks; freed ones run `conc` more, whose acks
        # then wait for room (at most `conc` in flight).
        expected = 2 * conc if behind else conc

        async def stalled() -> bool:
            return await marks(redis_client) >= expected and calls >= conc

        await until(stalled, f"{expected} tasks run with their acks unanswered")
        assert await marks(redis_client) == expected
        assert calls == conc
        gate.set()
        await asyncio.wait_for(run, 60)
    finally:
        gate.set()
        if not run.done():
            run.cancel()
    stats = await q.job_stats("lg-job")
    assert (stats.succeeded, stats.in_flight, stats.finished) == (TASKS, 0, True)
    assert await marks(redis_client) == TASKS
    assert await redis_client.hlen(q.keys.worker("lg-w")) == 0  # type: ignore[misc]
