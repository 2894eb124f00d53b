"""Browser page time in the queue, on a real redis-server: add_browser_seconds counts it per job and per
tenant's UTC day (rolled over at midnight as pages-per-day is), skips jobs that are gone, sums over a sharded
pool's shards, and the tenant table's browserSecondsPerDay field sits beside rows written before it."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from clocks import Clock
from trawl.queue import JobConfig, Queue, TenantLimits, TenantPolicy
from trawl.queue.tenants import decode_limits

PREFIX = "trawl:{ns/browsertime}"
DAY = 86400


@pytest.fixture
def clock() -> Clock:
    return Clock(1_800_000_000.0 - 1_800_000_000.0 % DAY + DAY - 10)  # ten seconds before 00:00 UTC


@pytest.fixture
def q(redis_client: aioredis.Redis, clock: Clock) -> Queue:
    return Queue(redis_client, PREFIX, lease_seconds=60, clock=clock)


async def usage_of(q: Queue, tenant: str) -> float:
    return {u.tenant: u.browser_seconds_today for u in await q.tenant_usage()}[tenant]


async def test_two_jobs_of_a_tenant_add_up_for_the_day_which_rolls_over_at_midnight(
    q: Queue, clock: Clock, redis_client: aioredis.Redis
) -> None:
    for job_id, tenant in (("a-1", "a"), ("a-2", "a"), ("b-1", "b")):
        await q.register_job(JobConfig(job_id, tenant=tenant))
    assert await q.add_browser_seconds({"a-1": 1.5, "a-2": 2.25, "b-1": 0.5}) == 3
    assert await q.add_browser_seconds({"a-1": 0.25}) == 1
    assert await usage_of(q, "a") == 4.0 and await usage_of(q, "b") == 0.5
    # each job keeps its own total, across days
    assert await redis_client.hget(q.keys.job("a-1"), "bms") == b"1750"

    clock.advance(11)  # 00:00:01 UTC: the day's sum is yesterday's, reported as 0 before any new time comes
    assert await usage_of(q, "a") == 0.0
    assert await q.add_browser_seconds({"a-2": 3.0}) == 1
    assert await usage_of(q, "a") == 3.0  # reset at the day's first count, not added to yesterday's
    assert await usage_of(q, "b") == 0.0
    assert await redis_client.hget(q.keys.job("a-2"), "bms") == b"5250"


async def test_jobs_that_are_gone_are_ignored_and_never_recreated(q: Queue, redis_client: aioredis.Redis) -> None:
    await q.register_job(JobConfig("a-1", tenant="a"))
    await q.register_job(JobConfig("a-2", tenant="a"))
    await q.cancel("a-2")
    assert await q.add_browser_seconds({"a-1": 1.0, "a-2": 5.0, "never": 7.0}) == 1
    assert await usage_of(q, "a") == 1.0
    assert not await redis_client.exists(q.keys.job("a-2"), q.keys.job("never"))
    assert await q.add_browser_seconds({}) == 0


async def test_a_job_without_a_tenant_counts_its_own_time(q: Queue, redis_client: aioredis.Redis) -> None:
    await q.register_job(JobConfig("plain"))
    assert await q.add_browser_seconds({"plain": 0.75}) == 1
    assert await redis_client.hget(q.keys.job("plain"), "bms") == b"750"


async def test_the_table_carries_the_quota_and_decodes_rows_written_before_it(
    q: Queue, redis_client: aioredis.Redis
) -> None:
    await q.set_tenant_policy(
        TenantPolicy(tenants={"a": TenantLimits(weight=2, pages_per_day=100, browser_seconds_per_day=3600.0)})
    )
    row = (await redis_client.hget(q.keys.tenant_config, "a")).decode()
    assert row == "2|||100||3600.0"
    assert decode_limits(row).browser_seconds_per_day == 3600.0
    # A row an operator of the previous release wrote (5 fields): claims honour it, the new field is off.
    await redis_client.hset(q.keys.tenant_config, "a", "2|1||100|")
    assert decode_limits("2|1||100|") == TenantLimits(weight=2, max_in_flight=1, pages_per_day=100)
    await q.register_job(JobConfig("a-1", tenant="a"))
    await q.enqueue("a-1", [f"https://a.test/{i}" for i in range(3)])
    assert len(await q.claim("w", 3)) == 1  # its in-flight quota of 1, read from the old row
    [usage] = await q.tenant_usage()
    assert usage.weight == 2 and usage.throttled == "inFlight"


async def test_a_sharded_pool_counts_on_its_home_and_keeps_the_quota_whole(redis_client: aioredis.Redis) -> None:
    from trawl.queue.sharded import ShardedQueue

    sq = ShardedQueue(redis_client, PREFIX, shards=3)
    await sq.set_tenant_policy(TenantPolicy(tenants={"a": TenantLimits(browser_seconds_per_day=90.0)}))
    for shard in sq.shards:  # the operator compares the pool's sum with the whole quota: no shard splits it
        raw = await redis_client.hget(shard.keys.tenant_config, "a")
        assert decode_limits(raw.decode()).browser_seconds_per_day == 90.0
    await sq.register_job(JobConfig("a-1", tenant="a"))
    assert await sq.add_browser_seconds({"a-1": 2.0}) == 1
    await sq.shards[2].add_browser_seconds({"a-1": 3.0})  # time counted on another shard is summed too
    [usage] = await sq.tenant_usage()
    assert usage.browser_seconds_today == 5.0
