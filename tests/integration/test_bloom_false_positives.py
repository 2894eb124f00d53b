"""Issue 37: a crawl's Bloom filter on a real redis-server takes new URLs for seen ones at about the rate
the job asked for. The filter the scripts wrote is read back and probed with never-seen URLs through the
same bit positions (trawl.queue.bloom.positions, checked here to be exactly the bits the script sets), and
new URLs offered through the scripts past the filter's load are skipped at that rate, as the job's
possiblySkipped expects."""

from __future__ import annotations

import redis.asyncio as aioredis

from trawl.queue import Queue
from trawl.queue.bloom import contains, false_positive_rate, positions, size_for
from trawl.queue.model import JobConfig, Task

PREFIX = "trawl:{test/bloomfp}"
N, RATE = 20_000, 0.01  # a high rate, so that a few tens of thousands of probes measure it closely


def url(i: int, family: str) -> str:
    return f"https://shop{i % 5}.example.com/{family}/category-{i % 37}/item-{i}.html"


async def test_the_measured_false_positive_rate_is_the_configured_one(redis_client: aioredis.Redis) -> None:
    await redis_client.flushall()
    q = Queue(redis_client, PREFIX)
    size = size_for(N, RATE)
    probes = 2_000  # offered through the scripts past the filter's load: the cap leaves room for them
    await q.register_job(JobConfig("fp", max_pages=N + probes, max_depth=5, bloom=size))
    parent = Task("fp", "t0", "https://shop0.example.com/", 0, 1, 0.0)
    added = await q.enqueue_discovered(parent, [url(i, "seen") for i in range(N)])
    assert N - added < 3 * RATE * N, "filling it, few new URLs were skipped (the rate only holds at the end)"

    raw = await redis_client.get(q.keys.bloom("fp")) or b""
    expected = bytearray(len(raw))
    for i in range(N):
        for bit in positions(url(i, "seen"), size):
            expected[bit >> 3] |= 0x80 >> (bit & 7)
    assert raw == bytes(expected), "the script sets exactly the bits trawl.queue.bloom.positions names"

    fresh = 50_000
    measured = sum(contains(raw, url(i, "fresh"), size) for i in range(fresh)) / fresh
    predicted = false_positive_rate(size, added)
    assert 0.7 * RATE < measured < 1.3 * RATE, (measured, RATE)  # ~500 expected: 1.3x is over 6 sigma
    assert abs(measured - predicted) < 0.3 * predicted, (measured, predicted)

    before = (await q.job_stats("fp")).possibly_skipped
    more = await q.enqueue_discovered(parent, [url(i, "more") for i in range(probes)])
    skipped, expected_skips = probes - more, (await q.job_stats("fp")).possibly_skipped - before
    # past its load the rate rises a little (to ~1.4x at N + 10 %): about RATE * probes, as expected
    assert 0.3 * RATE * probes < skipped < 3 * RATE * probes, skipped
    assert 0.3 * expected_skips < skipped < 3 * expected_skips, (skipped, expected_skips)


async def test_on_a_sharded_pool_each_shard_keeps_a_whole_filter_and_the_status_counts_them_all(
    redis_client: aioredis.Redis,
) -> None:
    """A crawl's URLs spread over the pool's shards by URL, each shard deduping its own in a filter sized
    for the whole maxPages (one shard may borrow every page of the cap): the job's status counts N of them."""
    from trawl.queue.sharded import ShardedQueue

    await redis_client.flushall()
    q = ShardedQueue(redis_client, PREFIX, shards=3)
    size = size_for(3000, 0.001)
    await q.register_job(JobConfig("sh", max_pages=3000, max_depth=5, bloom=size))
    parent = Task("sh", "t0", "https://shop0.example.com/", 0, 1, 0.0)
    urls = [url(i, "sharded") for i in range(2000)]
    added = await q.enqueue_discovered(parent, urls)
    assert added >= 1990 and await q.enqueue_discovered(parent, urls) == 0, "repeats refused on every shard"
    held = [int(await redis_client.strlen(s.keys.bloom("sh"))) for s in q.shards]
    assert all(0 < n <= size.bytes for n in held) and sum(held) > 2 * size.bytes, held
    stats = await q.job_stats("sh")
    assert stats.total == added and stats.bloom is not None and stats.bloom.bytes >= sum(held)
    assert stats.bloom.hashes == size.hashes
