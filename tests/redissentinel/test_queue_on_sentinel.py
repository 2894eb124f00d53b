"""The queue through real Redis Sentinels: every transition with exact counts on the master they name;
a master name they do not know, or Sentinels that do not answer, reach the operator's RedisUnavailable
with what each Sentinel answered."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from rsentinel_helpers import MASTER_NAME

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev import procs
from trawl.dev.redis_sentinel import LocalRedisSentinel
from trawl.operator.connections import RedisConnections
from trawl.operator.problems import classify_error
from trawl.queue import JobConfig, Queue, RetryPolicy
from trawl.queue.keys import pool_prefix
from trawl.redisconn.client import connect
from trawl.redisconn.sentinel import SentinelTarget
from trawl.redisconn.settings import RedisUnreachable


def _pool_spec(addresses: list[str], master_name: str) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate(
        {"redis": {"mode": "Sentinel", "sentinels": addresses, "masterName": master_name}}
    )


async def test_queue_transitions_through_the_sentinels_with_exact_counts(
    redis_sentinel: LocalRedisSentinel, sentinel_client: aioredis.Redis
) -> None:
    clock = [1_000_000.0]
    q = Queue(sentinel_client, pool_prefix("rs", "queue"), clock=lambda: clock[0], lease_seconds=30)
    await q.register_job(JobConfig("j", retry=RetryPolicy(max_attempts=3, initial_delay=1, jitter=0)))
    assert await q.enqueue("j", [f"https://site/{i}" for i in range(30)], start_index=0) == 30
    assert await q.enqueue("j", [f"https://site/{i}" for i in range(30)], start_index=0) == 0  # idempotent
    await q.mark_enqueue_done("j")
    tasks = await q.claim("w@1", 30)
    assert len(tasks) == 30
    assert all(await q.ack_many(tasks[:20], "w@1"))
    for t in tasks[20:25]:
        assert not (await q.fail(t, "w@1", "Timeout", "slow")).dead_lettered
    for t in tasks[25:]:
        assert (await q.fail(t, "w@1", "HTTP4xx", "404")).dead_lettered
    clock[0] += 5
    again = await q.claim("w@2", 30)
    assert sorted(t.url for t in again) == sorted(t.url for t in tasks[20:25])
    assert all(await q.ack_many(again, "w@2"))
    stats = await q.job_stats("j")
    assert (stats.total, stats.succeeded, stats.dead, stats.pending, stats.in_flight) == (30, 25, 5, 0, 0)
    assert stats.finished
    # the keys are on the master the Sentinels name, and replicated to its replica
    master = redis_sentinel.master_port()
    assert redis_sentinel.command(master, "EXISTS", q.keys.job("j")) == 1
    assert sentinel_client.connection_pool.master_address == ("127.0.0.1", master)  # type: ignore[attr-defined]


async def test_unknown_master_name_is_unavailable_with_each_sentinels_answer(
    redis_sentinel: LocalRedisSentinel,
) -> None:
    connections = RedisConnections(close_grace=0)
    try:
        spec = _pool_spec(redis_sentinel.sentinel_addresses, "nosuchmaster")
        with pytest.raises(RedisUnreachable) as info:
            await connections.for_pool("ns", "p", spec, {})
        message = str(info.value)
        assert "master 'nosuchmaster' of Sentinels" in message
        for address in redis_sentinel.sentinel_addresses:
            assert f"{address}: monitors no master named 'nosuchmaster' (it knows '{MASTER_NAME}')" in message
        assert classify_error(info.value) == ("RedisUnavailable", f"Redis: RedisUnreachable: {message}")
        # the right name on the same Sentinels answers
        client = await connections.for_pool("ns", "p", _pool_spec(redis_sentinel.sentinel_addresses, MASTER_NAME), {})
        assert await client.ping()
    finally:
        await connections.close()


async def test_sentinels_that_do_not_answer_are_unavailable_with_the_connection_error() -> None:
    dead = [f"127.0.0.1:{p}" for p in procs.free_ports(2)]
    connections = RedisConnections(close_grace=0)
    try:
        with pytest.raises(RedisUnreachable) as info:
            await connections.for_pool("ns", "p", _pool_spec(dead, MASTER_NAME), {})
    finally:
        await connections.close()
    message = str(info.value)
    for address in dead:
        assert f"{address}: ConnectionError: Error 111 connecting to {address}" in message, message


async def test_a_plain_redis_named_as_a_sentinel_says_so(redis_sentinel: LocalRedisSentinel) -> None:
    not_a_sentinel = f"127.0.0.1:{redis_sentinel.master_port()}"
    client = connect("", sentinel=SentinelTarget.parse([not_a_sentinel], MASTER_NAME))
    try:
        with pytest.raises(aioredis.ConnectionError, match="ResponseError"):
            await client.ping()
    finally:
        await client.aclose()
