"""A crawl's Bloom filter on a real 6-node Redis Cluster: the filter key is built by the scripts from the seen
set's name, in the job's slot, so the enqueue scripts (shebang: declared keys' slot only) run on that slot's
master; repeats are refused and retention and cancel reach the filter."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.crc import key_slot

from trawl.queue import JobConfig, Queue
from trawl.queue.bloom import size_for
from trawl.queue.keys import pool_prefix
from trawl.queue.model import Task


async def test_a_bloom_filter_lives_in_the_jobs_slot_on_a_cluster(cluster_client: aioredis.Redis) -> None:
    q = Queue(cluster_client, pool_prefix("rc", "bloom"))
    await q.register_job(JobConfig("crawl", max_pages=5000, max_depth=3, bloom=size_for(5000, 0.001)))
    assert key_slot(q.keys.bloom("crawl").encode()) == key_slot(q.keys.job("crawl").encode())
    parent = Task("crawl", "t0", "https://site.test/", 0, 1, 0.0)
    urls = [f"https://site.test/p/{i}" for i in range(1000)]
    assert await q.enqueue_discovered(parent, urls) >= 995
    assert await q.enqueue_discovered(parent, urls) == 0
    assert (await q.job_stats("crawl")).possibly_skipped > 0
    await q.expire_job("crawl", 100)
    assert 0 < await cluster_client.ttl(q.keys.bloom("crawl")) <= 100
    await q.cancel("crawl")
    assert not await cluster_client.exists(q.keys.bloom("crawl"))
