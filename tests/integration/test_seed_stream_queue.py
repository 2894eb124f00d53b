"""Issue 32 on a real redis-server: a job's seeds go in a batch at a time, pass after pass (the operator's
own reconcile_job, driven as its timer drives it), resuming at the queue's cursor after a restart and
adding only what is missing; and a job keeps at most its pool's dead-letter records, the oldest dropped
and counted."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from job_passes import JobPasses, one_pool
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.redis_server import RedisServer
from trawl.operator.job import reconcile
from trawl.queue import JobConfig, Queue, RetryPolicy
from trawl.queue.keys import pool_prefix
from trawl.queue.sharded import ShardedQueue, make_queue, place

NAMESPACE, POOL, UID = "seeds", "pool", "uid-seeds"
# 3 listed URLs (two also in a range), two ranges that overlap (so the queue drops repeats) and one that
# does not: 3 + 3000 + 3000 + 2500 = 8503 positions, 7001 distinct URLs.
SPEC: dict[str, Any] = {
    "pool": POOL,
    "urls": ["https://a.example/p/1", "https://b.example/", "https://a.example/p/2"],
    "urlRanges": [
        {"template": "https://a.example/p/{n}", "start": 0, "end": 2999},
        {"template": "https://a.example/p/{n}", "start": 1500, "end": 4499},
        {"template": "https://c.example/list?page={n}", "start": 1, "end": 2500},
    ],
}


class Passes(JobPasses):
    """The job's reconcile passes, each from the status the previous one wrote, as the operator runs them;
    ``restart()`` drops every connection and queue client, as a restarted operator starts with none."""

    def __init__(self, redis_url: str, shards: int) -> None:
        pool = {"redis": {"url": redis_url, "shards": shards}, "jobLimits": {"maxUrlsPerJob": 10_000}}
        super().__init__("seeds", UID, SPEC, one_pool(NAMESPACE, POOL, pool), namespace=NAMESPACE)


async def _urls_by_shard(queue: Queue) -> dict[int, list[str]]:
    shards = queue.shards if isinstance(queue, ShardedQueue) else [queue]
    out: dict[int, list[str]] = {}
    for i, shard in enumerate(shards):
        payloads = await queue.redis.lrange(shard.keys.ready(UID), 0, -1)  # type: ignore[misc]
        if payloads:
            out[i] = [p.decode().split("|", 4)[4] for p in payloads]
    return out


@pytest.mark.parametrize("shards", [1, 3])
async def test_seeds_go_in_pass_by_pass_and_a_restart_adds_only_what_is_missing(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, shards: int
) -> None:
    monkeypatch.setattr(reconcile, "SEED_BATCHES_PER_PASS", 2)  # 4000 positions a pass: three passes
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    passes = Passes(redis_server.url, shards)
    spec = ScrapeJobSpec.model_validate(SPEC)
    assert spec.seed_count() == 8503 and len(spec.seed_urls()) == 7001
    try:
        first = await passes.run()
        assert first["enqueued"] == 4000 and first["phase"] == "Queued"
        queue = make_queue(client, pool_prefix(NAMESPACE, POOL), shards)
        assert await queue.seeds_enqueued(UID) == 4000
        # An operator that died inside its next pass: one more batch went in. One shard: its cursor moved
        # with it (one script), so the restarted operator continues after it. Sharded: the record of how far
        # was lost, so the restarted operator sends that batch again, and the shards' cursors skip it.
        batch = list(spec.seeds(4000))[:2000]
        await queue.enqueue_seeds(UID, 4000, batch)
        if shards > 1:
            await client.hset(queue.keys.job(UID), "sm", "4000," + ",".join(map(str, await _cursors(queue))))
        assert await queue.seeds_enqueued(UID) == (4000 if shards > 1 else 6000)
        passes.restart()
        second = await passes.run()
        assert second["enqueued"] == (8000 if shards > 1 else 8503)
        third = await passes.run()
        assert third["enqueued"] == 8503
        assert (await queue.job_stats(UID)).enqueue_done
        # Each distinct URL once, on the shard (and in the order) one whole-list enqueue gave it.
        expected = place(spec.seed_urls(), [True] * shards)
        assert await _urls_by_shard(queue) == expected
        assert third["counts"]["total"] == 7001
        again = await passes.run()  # later passes add nothing
        assert again["counts"]["total"] == 7001 and again["enqueued"] == 8503
    finally:
        await client.flushall()
        await client.aclose()


async def _cursors(queue: Queue) -> list[int]:
    """Each shard's seed cursor as of the first pass: what the lost mark recorded."""
    assert isinstance(queue, ShardedQueue)
    spec = ScrapeJobSpec.model_validate(SPEC)
    parts = place(list(spec.seeds())[:4000], [True] * len(queue.shards))
    return [len(parts.get(i, [])) for i in range(len(queue.shards))]


@pytest.mark.parametrize("shards", [1, 3])
async def test_a_job_keeps_its_pools_dead_letter_records_the_oldest_dropped_and_counted(
    redis_server: RedisServer, shards: int
) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    now = [1_800_000_000.0]
    queue = make_queue(client, pool_prefix(NAMESPACE, POOL), shards, clock=lambda: now[0])
    try:
        await queue.register_job(JobConfig(UID, retry=RetryPolicy(max_attempts=1), max_dead_letters_kept=3))
        urls = [f"https://gone.example/{i}" for i in range(12)]
        await queue.enqueue_seeds(UID, 0, urls)
        await queue.mark_enqueue_done(UID)
        tasks = await queue.claim("w", 100)
        assert len(tasks) == 12
        for task in tasks:
            now[0] += 1
            assert (await queue.fail(task, "w", "HTTP4xx", "404")).dead_lettered
        stats = await queue.job_stats(UID)
        assert stats.dead == 12 and stats.dead_dropped == 9 and stats.finished  # every one still counted
        kept = await queue.dead_letters(UID, limit=100)
        assert len(kept) == 3
        if shards == 1:  # one shard keeps the latest three; three shards keep one each, the latest of each
            assert [d.url for d in kept] == [t.url for t in reversed(tasks[-3:])]
        # What `trawl dlq retry` can send back is what is kept; the dropped stay counted as dead.
        assert await queue.requeue_dead(UID) == 3
        after = await queue.job_stats(UID)
        assert (after.dead, after.pending, after.dead_dropped) == (9, 3, 9)
    finally:
        await client.flushall()
        await client.aclose()
