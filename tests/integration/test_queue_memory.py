"""Memory: a pending task costs at most 130 bytes of Redis memory, and after 100,000 tasks complete and
retention passes, Redis ``used_memory`` returns to within 10% of the baseline."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from trawl.queue import JobConfig, Queue

PREFIX = "trawl:{mem/pool}"
TASKS = 100_000


async def used_memory(r: aioredis.Redis) -> int:
    return int((await r.info("memory"))["used_memory"])


async def test_memory_returns_to_baseline_after_retention(redis_client: aioredis.Redis) -> None:
    q = Queue(redis_client, PREFIX, enqueue_batch=5000)
    # Warm up: every script loaded, the pool's own small keys created.
    await q.register_job(JobConfig("warm"))
    await q.enqueue("warm", ["https://w/1"])
    (t,) = await q.claim("w", 1)
    await q.fail(t, "w", "HTTP4xx", "x")
    await q.requeue_dead("warm")
    await q.ack_many(await q.claim("w", 1), "w")
    await q.pool_signals()
    await q.cancel("warm")
    # ...and one small full cycle at the same batch sizes, so that the server's one-off growth (script
    # cache, reusable argument and reply buffers) is part of the baseline, not of the measurement.
    await drain_and_expire(q, redis_client, ("warm-2",), 5000)
    baseline = await used_memory(redis_client)

    per_task = await drain_and_expire(q, redis_client, ("mem-a", "mem-b"), TASKS)
    assert per_task <= 130, f"{per_task:.1f} bytes per pending task"
    after = await used_memory(redis_client)
    assert after <= baseline * 1.10, f"baseline {baseline} B, after {after} B"


async def drain_and_expire(q: Queue, redis_client: aioredis.Redis, jobs: tuple[str, ...], tasks: int) -> float:
    """Enqueue ``tasks`` over ``jobs``, complete them all, let retention expire the jobs; returns the
    bytes per pending task measured when all were enqueued."""
    before = await used_memory(redis_client)
    for job in jobs:
        await q.register_job(JobConfig(job, spec={"request": {"timeoutSeconds": 30}}))
        await q.enqueue(job, [f"https://shop.example.com/products/{i}" for i in range(tasks // len(jobs))])
        await q.mark_enqueue_done(job)
    per_task = (await used_memory(redis_client) - before) / tasks
    done = 0
    while True:
        batch = await q.claim("w", 1000)
        if not batch:
            break
        assert all(await q.ack_many(batch, "w"))
        done += len(batch)
    assert done == tasks
    for job in jobs:
        assert (await q.job_stats(job)).finished
        await redis_client.xadd(q.keys.results(job), {"url": "https://shop.example.com/products/0"})
        await q.expire_job(job, 1)
    await asyncio.sleep(1.5)
    for job in jobs:
        for key in q.keys.job_keys(job):
            assert not await redis_client.exists(key)  # also expires lazily if the active cycle has not yet
    assert await q.retire_worker("w")
    return per_task
