"""Issue 37 on a real redis-server: a crawl's ``maxPages`` split into per-shard quotas over a pool's shards
(trawl.queue.sharded) is reached exactly when enough distinct URLs come, whatever two calls of the job do
between each other's steps: the links and seeds a shard's quota refused are offered again once quota moved,
never dropped while another shard has some left (bench/frontier.py saw 445 of 10 M refused short of the cap).
Each shard is a hash tag of its own on one server, running the same scripts as on a cluster's masters."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from trawl.queue import JobConfig, RetryPolicy
from trawl.queue.keys import pool_prefix
from trawl.queue.sharded import ShardedQueue, shard_of

SHARDS = 3


def urls_on(shard: int, n: int, stem: str) -> list[str]:
    """``n`` distinct URLs placed on ``shard`` (a job present on every shard)."""
    return [u for u in (f"https://a.example/{stem}/{i}" for i in range(10_000)) if shard_of(u, SHARDS) == shard][:n]


async def everything_queued(q: ShardedQueue, job_id: str) -> Counter[str]:
    """Every URL the job's shards hold, claimed and acked: how many times each went in."""
    seen: Counter[str] = Counter()
    while tasks := await q.claim("w@1", 1000):
        seen.update(t.url for t in tasks)
        assert all(await q.ack_many(tasks, "w@1"))
    return seen


def between_add_and_check(q: ShardedQueue, meanwhile: Callable[[], Awaitable[object]]) -> list[object]:
    """Run ``meanwhile`` to its end at the first quota check of a shard (the check after an add its quota
    stopped short): another call of the job running between this call's add and its check, as two workers'
    calls interleave."""
    check = q._cap
    ran: list[object] = []
    started = False

    async def cap(shard: int, job_id: str) -> tuple[int | None, int]:
        nonlocal started
        if not started:  # the other call's own checks go straight through
            started = True
            ran.append(await meanwhile())
        return await check(shard, job_id)

    q._cap = cap  # type: ignore[method-assign]
    return ran


async def test_links_a_shard_refused_go_in_though_another_call_moved_quota_in_meanwhile(
    redis_client: aioredis.Redis,
) -> None:
    q = ShardedQueue(redis_client, pool_prefix("cap", "links"), shards=SHARDS)
    await q.register_job(JobConfig("c", max_pages=9, max_depth=3, retry=RetryPolicy(max_attempts=1)))
    seed = urls_on(0, 1, "seed")
    assert await q.enqueue("c", seed, start_index=0) == 1  # shard 0's quota: 1 of its 3 used
    (parent,) = await q.claim("w@1", 1)
    a = urls_on(1, 5, "a")  # shard 1's quota is 3: a[3:] refused for it
    b = [*urls_on(1, 3, "b"), a[0]]  # b's call borrows 4 for its links, uses 3 (a[0] is in already)
    ran = between_add_and_check(q, lambda: q.enqueue_discovered(parent, b))
    # A's add took a[:3]; B borrowed 4 (2 from shard 0, 2 from shard 2) and added its 3; A then finds shard 1
    # with room (1) and must not take it for "the rest were duplicates": a[3:] go in with that room and the
    # last of shard 2's quota.
    added = await q.enqueue_discovered(parent, a)
    assert ran == [3]
    assert added == 5
    stats = await q.job_stats("c")
    assert stats.total == 9  # maxPages, exactly
    assert all(await q.ack_many([parent], "w@1"))
    queued = await everything_queued(q, "c")
    assert queued == Counter(a + b[:3])  # every link once, none lost
    # the cap holds: no shard has quota left, a new link is refused, whatever shard it is for
    assert await q.enqueue_discovered(parent, urls_on(2, 2, "late") + urls_on(0, 2, "late")) == 0
    assert (await q.job_stats("c")).total == 9


async def test_sitemap_urls_a_shard_refused_go_in_though_another_call_moved_quota_in_meanwhile(
    redis_client: aioredis.Redis,
) -> None:
    q = ShardedQueue(redis_client, pool_prefix("cap", "sitemap"), shards=SHARDS)
    await q.register_job(JobConfig("s", max_pages=6, max_depth=0))
    a = urls_on(2, 4, "a")  # shard 2's quota is 2
    b = [*urls_on(2, 1, "b"), a[0], *urls_on(2, 1, "b2")]
    ran = between_add_and_check(q, lambda: q.enqueue_sitemap("s", 0, b))
    assert await q.enqueue_sitemap("s", 0, a) == 4
    assert ran == [2]
    assert (await q.job_stats("s")).total == 6
    assert await everything_queued(q, "s") == Counter([*a, b[0], b[2]])


async def test_links_of_many_calls_at_once_fill_the_cap_exactly(redis_client: aioredis.Redis) -> None:
    """Workers' calls for one shard racing at the cap, each batch with duplicates of the others'."""
    q = ShardedQueue(redis_client, pool_prefix("cap", "many"), shards=SHARDS)
    await q.register_job(JobConfig("m", max_pages=100, max_depth=3))
    await q.enqueue("m", urls_on(0, 1, "seed"), start_index=0)
    (parent,) = await q.claim("w@1", 1)
    links = urls_on(1, 60, "l") + urls_on(2, 60, "l")
    batches = [links[i::7] + links[(i + 1) :: 7][:3] for i in range(7)]
    assert sum(await asyncio.gather(*(q.enqueue_discovered(parent, b) for b in batches))) == 99
    assert (await q.job_stats("m")).total == 100


@pytest.mark.parametrize("appended", [False, True])
async def test_seeds_a_shard_refused_wait_for_quota_and_pass_only_at_the_cap(
    redis_client: aioredis.Redis, appended: bool
) -> None:
    q = ShardedQueue(redis_client, pool_prefix("cap", f"seeds{int(appended)}"), shards=SHARDS)
    await q.register_job(JobConfig("j", max_pages=6, max_depth=3))
    first = urls_on(0, 1, "first")
    assert await q.enqueue_seeds("j", 0, first) == 1
    (parent,) = await q.claim("w@1", 1)
    assert await q.enqueue_discovered(parent, urls_on(1, 2, "link")) == 2  # shard 1's quota (2) spent by links
    # Two seeds for shard 1 in the next batch of the seed stream: its quota is spent, the others have 3.
    more = urls_on(1, 2, "seed")
    if appended:
        assert await q.enqueue("j", more) == 2
    else:
        assert await q.enqueue_seeds("j", await q.seeds_enqueued("j"), more) == 2
        assert await q.seeds_enqueued("j") == 3
    assert (await q.job_stats("j")).total == 5
    # The job at its cap: of three more seeds one goes in, the shards' cursors pass the rest (a seed stream
    # goes on past them, as one queue's does) and a pass from the start adds nothing twice.
    last = urls_on(2, 3, "last")
    if appended:
        assert await q.enqueue("j", last) == 1
    else:
        assert await q.enqueue_seeds("j", 3, last) == 1
        assert await q.seeds_enqueued("j") == 6
        assert await q.enqueue_seeds("j", 6, urls_on(0, 2, "after")) == 0
        assert await q.seeds_enqueued("j") == 8
    assert (await q.job_stats("j")).total == 6
    assert [int(await redis_client.hget(s.keys.job("j"), "cur") or 0) for s in q.shards] == (  # type: ignore[misc]
        [1, 2, 3] if appended else [3, 2, 3]
    )
    assert all(await q.ack_many([parent], "w@1"))
    queued = await everything_queued(q, "j")
    assert sum(queued.values()) == 5 and max(queued.values()) == 1
    assert set(more) <= set(queued)
