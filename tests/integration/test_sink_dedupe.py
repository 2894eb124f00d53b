"""The sinks' record of written (job, URL) keys on a real Redis: a hash of 16-byte digests in 2-byte buckets,
with the set of hex keys older workers wrote read beside it (an upgrade in the middle of a job)."""

from __future__ import annotations

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.operator.job.results import results_written
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.sinks.base import DEDUPE_TTL_SECONDS, Deduped, Record, record_key
from trawl.sinks.digests import COUNT_FIELD, record_digest, split
from trawl.sinks.redisstream import RedisStreamSink

KEYS = Keys("trawl:{test/dedupe}")


def rec(job: str, url: str, key: str | None = None) -> Record:
    return Record(job, url, {"key": key or record_key(job, url), "job": job, "url": url})


def keyed(hex_key: str) -> Record:
    return rec("j", f"http://s.test/{hex_key}", hex_key)


async def written(redis: aioredis.Redis, job: str) -> int:
    return int(await redis.hget(KEYS.results_digests(job), COUNT_FIELD) or 0)


async def test_fresh_then_mark_then_never_fresh_again(redis_client: aioredis.Redis) -> None:
    dd = Deduped(redis_client, KEYS.results_written)
    recs = [rec("j", f"http://s.test/{i}") for i in range(50)]
    assert await dd.fresh("j", recs + recs[:3]) == recs  # a batch's own repeats count once
    await dd.mark("j", recs[:30])
    assert await dd.fresh("j", recs) == recs[30:]
    await dd.mark("j", recs)  # marking again adds only the new ones
    assert await dd.fresh("j", recs) == []
    assert await written(redis_client, "j") == 50
    assert 0 < await redis_client.ttl(KEYS.results_digests("j")) <= DEDUPE_TTL_SECONDS
    assert await dd.fresh("other", recs) == recs  # per job
    # Stored as the layout says: each digest's 14-byte tail in its 2-byte bucket's value.
    bucket, tail = split(record_digest(recs[0].key))
    assert tail in await redis_client.hget(KEYS.results_digests("j"), bucket)
    assert not await redis_client.exists(KEYS.results_written("j"))  # the legacy set is never written


async def test_a_tail_found_across_two_tails_of_a_bucket_is_not_written(redis_client: aioredis.Redis) -> None:
    """Bucket 0000 holds tails A then B; C's tail is A's second half and B's first half, found at byte 7 of
    the bucket's value: not a record written. Bytes that are pattern characters in Lua (%, ., NUL) are
    matched as bytes."""
    dd = Deduped(redis_client, KEYS.results_written)
    a = "0000" + "25" * 7 + "2e" * 7
    b = "0000" + "00" * 7 + "ff" * 7
    c = "0000" + "2e" * 7 + "00" * 7
    await dd.mark("j", [keyed(a), keyed(b)])
    assert c[4:] in (a[4:] + b[4:])  # the crafted overlap is there
    assert await dd.fresh("j", [keyed(a), keyed(b), keyed(c)]) == [keyed(c)]
    await dd.mark("j", [keyed(c)])
    assert await dd.fresh("j", [keyed(c)]) == [] and await written(redis_client, "j") == 3


async def test_a_batch_over_many_buckets_is_marked_whole(redis_client: aioredis.Redis) -> None:
    dd = Deduped(redis_client, KEYS.results_written)
    recs = [rec("j", f"http://s.test/{i}") for i in range(5000)]  # ~4,900 buckets: HSET in chunks
    await dd.mark("j", recs)
    assert await dd.fresh("j", recs) == [] and await written(redis_client, "j") == 5000


async def test_records_in_the_legacy_set_are_written_never_again(redis_client: aioredis.Redis) -> None:
    """A job half written by older workers (a set of hex keys): its records there are not fresh, not marked
    again, counted once, and the set keeps expiring with the job."""
    dd = Deduped(redis_client, KEYS.results_written)
    recs = [rec("j", f"http://s.test/{i}") for i in range(20)]
    await redis_client.sadd(KEYS.results_written("j"), *[r.key for r in recs[:10]])
    assert await dd.fresh("j", recs) == recs[10:]
    await dd.mark("j", recs)
    assert await written(redis_client, "j") == 10  # only the ones the set did not have
    assert 0 < await redis_client.ttl(KEYS.results_written("j")) <= DEDUPE_TTL_SECONDS
    assert await redis_client.scard(KEYS.results_written("j")) == 10  # read, not written
    q = Queue(redis_client, KEYS.prefix)
    spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["http://s.test/"]})
    assert (await results_written(q, spec, "j", {}))[0] == 20


async def test_the_stream_sink_reads_the_legacy_set_and_counts_both(redis_client: aioredis.Redis) -> None:
    sink = RedisStreamSink(redis_client, KEYS.results)
    recs = [rec("s", f"http://s.test/{i}") for i in range(6)]
    await redis_client.sadd(KEYS.results_written("s"), *[r.key for r in recs[:2]])
    assert await sink.write("s", recs[:4]) == 2
    assert await sink.write("s", recs) == 2
    assert await sink.write("s", recs) == 0
    assert await redis_client.xlen(KEYS.results("s")) == 4
    assert await written(redis_client, "s") == 4
    q = Queue(redis_client, KEYS.prefix)
    spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["http://s.test/"]})
    assert await results_written(q, spec, "s", {}) == (6, 4)
    await redis_client.expire(KEYS.results("s"), 120)  # retention: the record of written keys follows
    assert await sink.write("s", [rec("s", "http://s.test/new")]) == 1
    for key in (KEYS.results_digests("s"), KEYS.results_written("s")):
        assert 100 < await redis_client.ttl(key) <= 120
