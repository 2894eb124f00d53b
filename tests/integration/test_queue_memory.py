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


async def test_crawl_dedupe_keeps_a_12_byte_digest_per_url(redis_client: aioredis.Redis) -> None:
    """A crawled URL's dedupe entry (kept until retention) is a 12-byte digest, not the URL: exact
    dedupe within a job and across jobs, and a job registered before the digests keeps its full URLs."""
    q = Queue(redis_client, PREFIX)
    urls = [f"https://books.example.com/catalogue/category-{i % 50:02d}/item-{i:07d}.html" for i in range(2000)]
    await q.register_job(JobConfig("crawl", max_depth=3))
    assert await q.enqueue("crawl", urls) == 2000
    assert await q.enqueue("crawl", urls[::-1]) == 0  # every one seen already
    members = await redis_client.smembers(q.keys.seen("crawl"))
    assert len(members) == 2000 and {len(m) for m in members} == {12}
    per_url = int(await redis_client.memory_usage(q.keys.seen("crawl"), samples=0)) / 2000
    assert per_url <= 70, f"{per_url:.1f} bytes per deduplicated URL"  # a full-URL entry was ~120
    # dedupe across jobs uses the same digests in the pool's window
    await q.register_job(JobConfig("x1", dedupe_across_jobs=True, dedupe_window_seconds=3600))
    await q.register_job(JobConfig("x2", dedupe_across_jobs=True, dedupe_window_seconds=3600))
    assert await q.enqueue("x1", urls[:100]) == 100
    assert await q.enqueue("x2", urls[50:150]) == 50
    assert {len(m) for m in await redis_client.zrange(q.keys.cross_dedupe, 0, -1)} == {12}
    # a job that began with full-URL entries (registered before this change) goes on with them
    await q.register_job(JobConfig("old", max_depth=3))
    await redis_client.hdel(q.keys.job("old"), "dg")
    assert await q.enqueue("old", urls[:10]) == 10
    assert await q.enqueue("old", urls[:20]) == 10
    assert sorted(m.decode() for m in await redis_client.smembers(q.keys.seen("old"))) == sorted(urls[:20])
