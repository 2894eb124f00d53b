"""One pool over three hash tags (``spec.redis.shards: 3``) on the 6-node cluster: its tasks on three
masters, claims round-robin over them, exact per-job counters and dead letters, a maxPages job pinned to
one shard with its cap exact; and real workers crawling a site over the shards, every page once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from failover_workers import HOST
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import PRODUCT_FIELDS, Bookstore
from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.jobspec.wire import build_job_config
from trawl.queue import JobConfig, RetryPolicy, WorkerCordoned
from trawl.queue.keys import pool_prefix
from trawl.queue.sharded import ShardedQueue, shard_of
from worker_procs import start_worker


def masters_of(cluster: LocalRedisCluster, q: ShardedQueue) -> list[int]:
    return [cluster.master_for_slot(key_slot(s.prefix.encode())).port for s in q.shards]


async def test_a_pool_over_three_masters_with_exact_counts(
    redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis
) -> None:
    clock = [1_000_000.0]
    q = ShardedQueue(cluster_client, pool_prefix("rcs", "wide"), shards=3, clock=lambda: clock[0])
    assert len(set(masters_of(redis_cluster, q))) == 3  # three shards, three masters
    urls = [f"https://site-{i % 7}.example/p/{i}" for i in range(300)]
    await q.register_job(JobConfig("j", retry=RetryPolicy(max_attempts=1)))
    assert await q.enqueue("j", urls, start_index=0) == 300
    assert await q.enqueue("j", urls, start_index=0) == 0  # the operator's next pass adds nothing
    # The enqueue counter, summed over the shards (the autoscaler's burst check reads it every tick).
    assert await q.enqueued_total() == (await q.pool_signals()).enqueued_total == 300
    await q.mark_enqueue_done("j")
    per_shard = [(await s.job_stats("j")).total for s in q.shards]
    assert sum(per_shard) == 300 and min(per_shard) > 60, per_shard
    # claims rotate over the shards: three small claims come from three shards
    firsts = [await q.claim("w@1", 1) for _ in range(3)]
    assert sorted(t[0].task_id.rsplit(".", 1)[1] for t in firsts) == ["0", "1", "2"]
    tasks = [t[0] for t in firsts] + await q.claim("w@1", 1000)
    assert len(tasks) == 300 and len({(t.job_id, t.task_id) for t in tasks}) == 300
    assert (await q.heartbeat("w@1", in_flight=300, held=[(t.job_id, t.task_id) for t in tasks])).held == 300
    # The autoscaler's cordon goes to every shard (one key per hash tag); any shard's reply says so.
    await q.set_cordoned({"w"}, 30)
    assert (await q.heartbeat("w@3", in_flight=0)).cordoned
    with pytest.raises(WorkerCordoned):  # and a claim on any shard (the cordon check shares their slot)
        await q.claim("w@3", 10)
    await q.set_cordoned(set(), 30)
    assert not (await q.heartbeat("w@3", in_flight=0)).cordoned
    failed = tasks[:10]
    for t in failed:
        assert (await q.fail(t, "w@1", "HTTP4xx", "gone")).dead_lettered
    assert all(await q.ack_many(tasks[10:], "w@1"))
    stats = await q.job_stats("j")
    assert (stats.total, stats.succeeded, stats.dead, stats.pending, stats.in_flight) == (300, 290, 10, 0, 0)
    assert stats.finished
    dead = await q.dead_letters("j", limit=100)
    assert sorted(d.url for d in dead) == sorted(t.url for t in failed)
    assert await q.requeue_dead("j", [d.task_id for d in dead[:4]]) == 4
    again = await q.claim("w@2", 100)
    assert sorted(t.url for t in again) == sorted(d.url for d in dead[:4])
    assert all(await q.ack_many(again, "w@2"))
    signals = await q.pool_signals()
    assert (signals.completed_total, signals.dead, signals.ready, signals.in_flight) == (294, 6, 0, 0)
    assert (await q.job_stats("j")).succeeded == 294


async def test_a_cordon_seen_by_one_shard_mid_claim_keeps_what_the_others_leased(
    cluster_client: aioredis.Redis,
) -> None:
    q = ShardedQueue(cluster_client, pool_prefix("rcs", "cordon"), shards=3)
    await q.register_job(JobConfig("j", retry=RetryPolicy(max_attempts=1)))
    assert await q.enqueue("j", [f"https://site-{i % 7}.example/p/{i}" for i in range(60)], start_index=0) == 60
    await q.shards[1].set_cordoned({"w"}, 30)  # as if the cordon landed between two shards' claims
    first = await q.claim("w@1", 1000)  # shard 0 leases, shard 1 says cordoned: shard 0's tasks come back
    assert first and {t.task_id.rsplit(".", 1)[1] for t in first} == {"0"}
    assert (await q.job_stats("j")).in_flight == len(first)  # nothing leased that the worker does not hold
    with pytest.raises(WorkerCordoned):  # the next claim starts at shard 1: cordoned, nothing leased
        await q.claim("w@1", 1000)
    assert (await q.job_stats("j")).in_flight == len(first)
    await q.cancel("j")


async def test_a_max_pages_cap_is_exact_over_shards_and_quota_moves_where_the_links_are(
    redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis
) -> None:
    q = ShardedQueue(cluster_client, pool_prefix("rcs", "capped"), shards=3)
    await q.register_job(JobConfig("c", max_pages=50, max_depth=2))
    assert [(await s.job_stats("c")).exists for s in q.shards] == [True] * 3
    # 30 seeds that all hash to shard 0 (its own quota is 17 of 50): quota moves there before they go in
    seeds = [u for u in (f"https://a.example/{i}" for i in range(1000)) if shard_of(u, 3) == 0][:30]
    assert await q.enqueue("c", seeds, start_index=0) == 30
    assert await q.enqueue("c", seeds, start_index=0) == 0
    (parent,) = await q.claim("w@1", 1)
    # 40 links for shard 1: 20 fit the cap of 50 in total, whatever the shards' first quotas were
    links = [u for u in (f"https://a.example/x{i}" for i in range(1000)) if shard_of(u, 3) == 1][:40]
    assert await q.enqueue_discovered(parent, links) == 20
    assert await q.enqueue_discovered(parent, links) == 0  # the cap holds; nothing twice
    totals = [(await s.job_stats("c")).total for s in q.shards]
    assert totals == [30, 20, 0], totals
    assert (await q.job_stats("c")).total == 50


async def test_links_refused_by_a_shards_quota_go_in_after_another_calls_borrow_on_three_masters(
    redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis
) -> None:
    """Issue 37 on three masters (tests/integration/test_queue_shard_cap.py has the cases): a call whose
    links the shard's quota stopped, and another's borrow moves quota in before its check; all go in."""
    q = ShardedQueue(cluster_client, pool_prefix("rcs", "race"), shards=3)
    assert len(set(masters_of(redis_cluster, q))) == 3
    await q.register_job(JobConfig("r", max_pages=9, max_depth=2))
    on = [[u for u in (f"https://a.example/{k}/{i}" for i in range(300)) if shard_of(u, 3) == 1] for k in "ab"]
    await q.enqueue("r", [u for u in (f"https://s.example/{i}" for i in range(30)) if shard_of(u, 3) == 0][:1])
    (parent,) = await q.claim("w@1", 1)
    a, b = on[0][:5], [*on[1][:3], on[0][0]]  # shard 1's quota is 3: a's last two are refused for it
    check, other = q._cap, []

    async def cap(shard: int, job_id: str) -> tuple[int | None, int]:
        if not other:  # once, between a's add and its check: b borrows 4 and uses 3 (one is a's)
            other.append(0)
            other.append(await q.enqueue_discovered(parent, b))
        return await check(shard, job_id)

    q._cap = cap  # type: ignore[method-assign]
    assert await q.enqueue_discovered(parent, a) == 5
    assert other == [0, 3]
    assert (await q.job_stats("r")).total == 9  # maxPages, none of a's links lost


async def test_workers_crawl_a_site_over_three_shards_every_page_once(
    redis_cluster: LocalRedisCluster,
    cluster_client: aioredis.Redis,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    prefix = pool_prefix("rcs", "crawl")
    q = ShardedQueue(cluster_client, prefix, shards=3, lease_seconds=10)
    with Bookstore(host=HOST) as site:
        spec = ScrapeJobSpec.model_validate(
            {
                "pool": "crawl",
                "urls": [site.url + "/"],
                "crawl": {"maxDepth": 10, "maxPages": 1000, "exclude": ["/private/"]},
                "extract": {"fields": PRODUCT_FIELDS, "onlyMatching": r"/product/"},
                "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 16},
            }
        )
        job_id = uuid.uuid4().hex[:12]
        await q.register_job(build_job_config(job_id, spec, None))
        await q.enqueue(job_id, spec.seed_urls(), start_index=0)
        await q.mark_enqueue_done(job_id)
        for n in range(2):
            redis_args = ["--redis-url", redis_cluster.url, "--redis-cluster", "--redis-shards", "3"]
            start_worker(
                workers, redis_args, prefix, f"shard-{n}", tmp_path, allowed=f"{HOST}/32", drain=None, parse_processes=0
            )
        deadline = time.monotonic() + 120
        while not (await q.job_stats(job_id)).finished:
            assert time.monotonic() < deadline, await q.job_stats(job_id)
            assert all(w.poll() is None for w in workers), (tmp_path / "shard-0.log").read_text()[-2000:]
            await asyncio.sleep(0.2)
        fetched = Counter(e.path for e in site.entries() if e.path != "/robots.txt")
        expected = site.expected()
    recs = [json.loads(f[b"data"]) for _id, f in await cluster_client.xrange(q.keys.results(job_id))]
    assert sorted(r["url"] for r in recs) == sorted(expected)  # every product once, on the home shard
    assert set(fetched.values()) == {1}, [p for p, c in fetched.items() if c > 1][:5]  # dedupe exact over shards
    stats = await q.job_stats(job_id)
    assert stats.total == stats.succeeded == len(fetched)
    per_shard = [(await s.job_stats(job_id)).succeeded for s in q.shards]
    assert min(per_shard) > 0 and sum(per_shard) == stats.succeeded, per_shard  # every master did part


async def test_a_job_begun_before_the_pool_grew_stays_on_its_shard(
    redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis
) -> None:
    """shards 1 -> 3 while a crawl runs: its links go to the home shard (its dedupe set and cap are
    there), its counters stay exact, and it finishes; a job created afterwards spreads."""
    prefix = pool_prefix("rcs", "grows")
    one = ShardedQueue(cluster_client, prefix, shards=1)
    await one.register_job(JobConfig("old", max_pages=30, max_depth=3))
    await one.enqueue("old", ["https://a.example/0"], start_index=0)
    await one.mark_enqueue_done("old")
    three = ShardedQueue(cluster_client, prefix, shards=3)
    await three.register_job(JobConfig("old", max_pages=30, max_depth=3))  # the operator's next pass
    (parent,) = await three.claim("w@1", 5)
    links = [f"https://a.example/{i}" for i in range(1, 60)]
    assert await three.enqueue_discovered(parent, links) == 29  # the cap of 30, on the home shard
    assert await three.enqueue_discovered(parent, links) == 0
    assert [(await s.job_stats("old")).total for s in three.shards] == [30, 0, 0]
    assert all(await three.ack_many([parent], "w@1"))
    while tasks := await three.claim("w@1", 100):
        assert all(await three.ack_many(tasks, "w@1"))
    stats = await three.job_stats("old")
    assert (stats.total, stats.succeeded) == (30, 30) and stats.finished
    await three.register_job(JobConfig("new"))
    await three.enqueue("new", [f"https://b.example/{i}" for i in range(90)], start_index=0)
    spread = [(await s.job_stats("new")).total for s in three.shards]
    assert sum(spread) == 90 and min(spread) > 10, spread
