"""Tenants in the queue, on a real redis-server: claims shared by weight (work-conserving, a returning
tenant served from the next claim), quotas (in flight, requests per second, pages per day) that hold a
tenant back without failing it and show why, priority aging, and the rings of jobs queued before tenants."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from clocks import Clock
from trawl.queue import JobConfig, Queue, Task, TenantLimits, TenantPolicy

PREFIX = "trawl:{ns/tenants}"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def q(redis_client: aioredis.Redis, clock: Clock) -> Queue:
    return Queue(redis_client, PREFIX, lease_seconds=60, clock=clock, rand=lambda: 0.0)


async def backlog(q: Queue, tenant: str, n: int, *, jobs: int = 1, priority: int = 5, tag: str = "") -> list[str]:
    ids = []
    for j in range(jobs):
        job_id = f"{tenant or 'none'}{tag}-{j}"
        await q.register_job(JobConfig(job_id, priority=priority, tenant=tenant))
        await q.enqueue(job_id, [f"https://{tenant or 'none'}.test/{tag}{j}/{i}" for i in range(n)])
        ids.append(job_id)
    return ids


def tenant_of(task: Task) -> str:
    return task.job_id.split("-", 1)[0]


async def claim_and_ack(q: Queue, worker: str, count: int) -> list[Task]:
    got = await q.claim(worker, count)
    if got:
        await q.ack_many(got, worker)
    return got


async def tenants_claimed(q: Queue, count: int, times: int = 1) -> Counter[str]:
    """Tenants of the tasks ``times`` claims of ``count`` took (each acked at once)."""
    out: Counter[str] = Counter()
    for _ in range(times):
        out.update(tenant_of(t) for t in await claim_and_ack(q, "w", count))
    return out


async def test_claims_follow_the_weights_in_every_window(q: Queue) -> None:
    await q.set_tenant_policy(
        TenantPolicy(tenants={"a": TenantLimits(weight=3), "b": TenantLimits(weight=2), "c": TenantLimits(weight=1)})
    )
    for t in "abc":
        await backlog(q, t, 1500, jobs=3 if t == "a" else 1)  # a's three jobs get one share, not three
    order: list[str] = []
    sizes = [1, 7, 3, 12, 5, 16, 2, 9]  # uneven claims, as auto-sized workers make them
    i = 0
    while len(order) < 2400:
        order += [tenant_of(t) for t in await claim_and_ack(q, f"w{i % 3}", sizes[i % len(sizes)])]
        i += 1
    for start in range(0, len(order) - 600 + 1, 300):
        window = Counter(order[start : start + 600])
        for t, w in (("a", 3), ("b", 2), ("c", 1)):
            share = window[t] / 600
            assert abs(share - w / 6) <= 0.05 * w / 6, (start, dict(window))


async def test_a_tenant_without_work_leaves_its_share_and_gets_it_back_at_the_next_claim(q: Queue) -> None:
    await q.set_tenant_policy(TenantPolicy(tenants={"a": TenantLimits(weight=1), "b": TenantLimits(weight=1)}))
    await backlog(q, "a", 500)
    assert await tenants_claimed(q, 10, 20) == {"a": 200}  # work-conserving: b has nothing, a takes every slot
    await backlog(q, "b", 500)
    assert await tenants_claimed(q, 10) == {"a": 5, "b": 5}  # no catch-up burst for b, no delay either


async def test_in_flight_quota_holds_a_tenant_back_and_leaves_the_rest_to_others(q: Queue, clock: Clock) -> None:
    await q.set_tenant_policy(TenantPolicy(tenants={"a": TenantLimits(weight=5, max_in_flight=3)}))
    await backlog(q, "a", 50)
    await backlog(q, "b", 50)
    first = await q.claim("w1", 10)
    assert Counter(tenant_of(t) for t in first) == {"a": 3, "b": 7}
    second = await q.claim("w2", 10)
    assert Counter(tenant_of(t) for t in second) == {"b": 10}
    usage = {u.tenant: u for u in await q.tenant_usage()}
    assert usage["a"].in_flight == 3 and usage["a"].throttled == "inFlight"
    assert usage["a"].throttled_message == "3/3 in flight"
    assert usage["b"].throttled is None and usage["b"].in_flight == 17
    signals = await q.pool_signals(reap=False)
    assert signals.held == 47 and signals.ready == 33  # a's ready work is not work more workers could run
    # Every way out of flight gives the quota back: an ack, a failure, a release.
    a_tasks = [t for t in first if tenant_of(t) == "a"]
    await q.ack(a_tasks[0], "w1")
    await q.fail(a_tasks[1], "w1", "Timeout", "slow")
    await q.release(a_tasks[2], "w1")
    usage = {u.tenant: u for u in await q.tenant_usage()}
    assert usage["a"].in_flight == 0
    again = await q.claim("w3", 3)
    assert Counter(tenant_of(t) for t in again)["a"] >= 2  # its pass is behind: it is served first
    usage = {u.tenant: u for u in await q.tenant_usage()}
    assert usage["a"].in_flight == Counter(tenant_of(t) for t in again)["a"]


async def test_lost_and_cancelled_leases_give_the_in_flight_quota_back(q: Queue, clock: Clock) -> None:
    await q.set_tenant_policy(TenantPolicy(tenants={"a": TenantLimits(max_in_flight=4)}))
    [job] = await backlog(q, "a", 20)
    [other] = await backlog(q, "a", 20, tag="x")
    assert len(await q.claim("dies", 4)) == 4
    clock.t += 61  # the worker's lease runs out: reaping returns its tasks
    await q.reap()
    assert {u.tenant: u.in_flight for u in await q.tenant_usage()} == {"a": 0}
    got = await q.claim("w", 4)
    assert len(got) == 4
    await q.cancel(job)
    await q.cancel(other)
    assert {u.tenant: u.in_flight for u in await q.tenant_usage()} == {"a": 0}
    assert await q.ack_many(got, "w") == [False] * 4  # late acks of a cancelled job count nothing
    assert {u.tenant: u.in_flight for u in await q.tenant_usage()} == {"a": 0}


async def test_pages_per_day_and_rate_quotas_are_exact(q: Queue, clock: Clock) -> None:
    await q.set_tenant_policy(
        TenantPolicy(
            tenants={"a": TenantLimits(pages_per_day=7), "b": TenantLimits(requests_per_second=4)},
            default=TenantLimits(weight=1),
        )
    )
    await backlog(q, "a", 20)
    await backlog(q, "b", 100)
    assert await tenants_claimed(q, 5, 6) == {"a": 7, "b": 4}  # b: the bucket holds one second (4); a: the day's 7
    usage = {u.tenant: u for u in await q.tenant_usage()}
    assert usage["a"].throttled == "pagesPerDay" and usage["a"].throttled_message == "7/7 pages today"
    assert usage["a"].pages_today == 7
    assert usage["b"].throttled == "requestsPerSecond"
    clock.t += 2.5  # ten more tokens, capped at the bucket's one second
    assert await tenants_claimed(q, 10) == {"b": 4}
    clock.t += 86400  # a new UTC day
    assert (await tenants_claimed(q, 20))["a"] == 7
    usage = {u.tenant: u for u in await q.tenant_usage()}
    assert usage["a"].pages_today == 7 and usage["a"].claimed_total == 14


async def test_a_starved_priority_is_served_after_the_aging_bound(q: Queue, clock: Clock) -> None:
    await q.set_tenant_policy(TenantPolicy(aging_seconds=30))
    await backlog(q, "hi", 500, priority=9)
    await backlog(q, "lo", 50, priority=1)
    for _ in range(5):
        assert set(await tenants_claimed(q, 10)) == {"hi"}
        clock.t += 5
    clock.t += 6  # the low priority has waited 31 s
    assert set(await tenants_claimed(q, 10)) == {"lo"}
    assert set(await tenants_claimed(q, 10)) == {"hi"}  # and waits again


async def test_jobs_queued_before_tenants_are_still_claimed(q: Queue, redis_client: aioredis.Redis) -> None:
    [job] = await backlog(q, "", 5)
    k = q.keys
    # What an older Trawl left: the job in its priority's ring, no tenant queue, no tenant on the job.
    await redis_client.delete(k.tenant_queue(5), k.level_served, f"{PREFIX}:tv")
    await redis_client.hdel(k.job(job), "tn")
    assert (await q.pool_signals(reap=False)).ready == 5
    got = await q.claim("w", 10)
    assert len(got) == 5
    await q.ack_many(got, "w")
    assert (await q.job_stats(job)).succeeded == 5


async def test_a_sharded_pool_splits_each_quota_over_its_shards(redis_client: aioredis.Redis) -> None:
    from trawl.queue.sharded import ShardedQueue

    sq = ShardedQueue(redis_client, PREFIX, shards=3)
    await sq.set_tenant_policy(TenantPolicy(tenants={"a": TenantLimits(weight=2, max_in_flight=10)}))
    await sq.register_job(replace(JobConfig("a-0"), tenant="a"))
    await sq.enqueue("a-0", [f"https://a.test/{i}" for i in range(60)])
    got: list[Task] = []
    for _ in range(6):
        got += await sq.claim("w", 20)
    assert len(got) == 9  # 3 per shard (10 // 3): never above the tenant's 10
    [usage] = await sq.tenant_usage()
    assert usage.in_flight == 9 and usage.throttled == "inFlight"


async def test_a_full_tenant_queue_stops_seeds_in_their_stream_and_loses_none(q: Queue) -> None:
    await q.set_tenant_policy(TenantPolicy(tenants={"a": TenantLimits(max_queued=25)}))
    await q.register_job(JobConfig("a-0", tenant="a"))
    await q.register_job(JobConfig("a-1", tenant="a"))
    seeds = {j: [f"https://a.test/{j}/{i}" for i in range(40)] for j in ("a-0", "a-1")}
    q.enqueue_batch = 15
    assert await q.enqueue_seeds("a-0", 0, seeds["a-0"]) == 25  # 15, then 10 of the next batch
    assert await q.seeds_enqueued("a-0") == 25
    assert await q.enqueue_seeds("a-1", 0, seeds["a-1"]) == 0  # the tenant's queue is full
    [usage] = await q.tenant_usage()
    assert usage.queued == 25 and usage.queue_full_message == "25/25 URLs queued"
    assert usage.throttled is None  # claims are not held: the 25 may run now
    assert (await q.pool_signals(reap=False)).ready == 25
    done: list[str] = []
    for _ in range(20):  # a worker drains; the operator's passes go on from each job's cursor
        for job_id, urls in seeds.items():
            at = await q.seeds_enqueued(job_id)
            await q.enqueue_seeds(job_id, at, urls[at:])
        got = await q.claim("w", 10)
        done += [t.url for t in got]
        await q.ack_many(got, "w")
        [usage] = await q.tenant_usage()
        assert usage.queued <= 25
    assert sorted(done) == sorted(seeds["a-0"] + seeds["a-1"])  # every seed once, none lost
    [usage] = await q.tenant_usage()
    assert usage.queued == 0 and usage.queue_full_message == ""


async def test_cancel_gives_a_tenants_queue_room_back(q: Queue) -> None:
    await q.set_tenant_policy(TenantPolicy(tenants={"a": TenantLimits(max_queued=10)}))
    await q.register_job(JobConfig("a-0", tenant="a"))
    await q.enqueue_seeds("a-0", 0, [f"https://a.test/{i}" for i in range(30)])
    await q.claim("w", 3)
    await q.fail((await q.claim("w", 1))[0], "w", "Timeout", "slow")  # one delayed: still queued
    assert (await q.tenant_usage())[0].queued == 7
    await q.cancel("a-0")
    assert (await q.tenant_usage())[0].queued == 0
