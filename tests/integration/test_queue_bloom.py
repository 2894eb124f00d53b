"""A crawl's Bloom filter tier (spec.crawl.bloomFilter) in the queue's scripts on a real redis-server: new URLs
are added and repeats are not, at the rate the filter was sized for; the filter costs what the sizing says
(a Redis string of bits/8 bytes, not ~65 bytes per URL as the exact set); the expected count of pages
possibly skipped is kept on the job and shown on its status; cancel and retention remove the filter."""

from __future__ import annotations

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.bloom import false_positive_rate, size_for
from trawl.queue.model import JobConfig, Task

PREFIX = "trawl:{test/bloom}"
CAP = 20_000


def crawl_job(job_id: str, rate: float | None) -> JobConfig:
    crawl: dict[str, object] = {"maxPages": CAP, "maxDepth": 5}
    if rate is not None:
        crawl["bloomFilter"] = {"falsePositiveRate": rate}
    spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://site.test/"], "crawl": crawl})
    return build_job_config(job_id, spec, None)


async def test_a_bloom_filter_dedupes_within_its_rate_and_costs_what_its_size_says(
    redis_client: aioredis.Redis,
) -> None:
    await redis_client.flushall()
    q = Queue(redis_client, PREFIX)
    config = crawl_job("bloom", 0.001)
    assert config.bloom == size_for(CAP, 0.001) and config.bloom is not None
    await q.register_job(config)
    parent = Task("bloom", "t0", "https://site.test/", 0, 1, 0.0)
    fresh = [f"https://site.test/p/{i}" for i in range(CAP - 1)]
    added = await q.enqueue_discovered(parent, fresh)
    skipped = len(fresh) - added
    # At the end the filter is full to its cap: a new URL is taken for a seen one at most at this rate.
    assert skipped <= 10 * false_positive_rate(config.bloom, CAP) * CAP + 5, skipped
    assert await q.enqueue_discovered(parent, fresh[:5000]) == 0, "repeats are never added"
    stats = await q.job_stats("bloom")
    assert stats.bloom == config.bloom
    assert 0 < stats.possibly_skipped < 0.01 * CAP, "the expected false skips are counted, and small"
    keys = q.keys
    assert await redis_client.strlen(keys.bloom("bloom")) <= config.bloom.bytes
    assert not await redis_client.exists(keys.seen("bloom")), "no exact set beside the filter"

    await q.expire_job("bloom", 100)
    assert 0 < await redis_client.ttl(keys.bloom("bloom")) <= 100
    await q.cancel("bloom")
    assert not await redis_client.exists(keys.bloom("bloom"))


async def test_bloom_costs_a_fraction_of_the_exact_set(redis_client: aioredis.Redis) -> None:
    """Measured, not asserted as a speed: the filter's bytes against the exact set's for the same URLs."""
    await redis_client.flushall()
    q = Queue(redis_client, PREFIX)
    urls = [f"https://site.test/p/{i}" for i in range(CAP - 1)]
    used = {}
    for name, rate in (("exact", None), ("bloom", 0.001)):
        await q.register_job(crawl_job(name, rate))
        parent = Task(name, "t0", "https://site.test/", 0, 1, 0.0)
        await q.enqueue_discovered(parent, urls)
        key = q.keys.seen(name) if rate is None else q.keys.bloom(name)
        used[name] = int(await redis_client.memory_usage(key) or 0)
    assert used["bloom"] * 10 < used["exact"], used
    print(f"dedupe bytes per URL: exact {used['exact'] / CAP:.1f}, bloom {used['bloom'] / CAP:.2f}")
