"""`trawl worker --redis-sentinels` as real processes through three Sentinels: a job drains with exact
counts; the master SIGKILLed mid-job is replaced by its replica (promoted by the Sentinels), the workers
follow, the job completes with every record exactly once, and the duplicate fetches are counted."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from rsentinel_helpers import worker_redis_args

from failover_workers import HOST, WORKER_OPTIONS, duplicate_records, records, reported_within, submit, wait_finished
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.redis_sentinel import LocalRedisSentinel
from trawl.queue.keys import pool_prefix
from worker_procs import start_worker

NS = "rsw"


async def test_a_job_drains_through_the_sentinels_with_exact_counts(
    redis_sentinel: LocalRedisSentinel,
    sentinel_client: aioredis.Redis,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    prefix = pool_prefix(NS, "drain")
    with Bookstore(host=HOST) as site:
        urls = [site.product_url(i) for i in range(1, 41)]
        job_id, queue = await submit(sentinel_client, prefix, urls)
        start_worker(
            workers, worker_redis_args(redis_sentinel), prefix, "drain-0", tmp_path, metrics_port=0, **WORKER_OPTIONS
        )
        await wait_finished(queue, job_id, 90)
        fetched = Counter(e.path for e in site.entries() if e.path != "/robots.txt")
        expected = site.expected()
    stats = await queue.job_stats(job_id)
    assert (stats.total, stats.succeeded, stats.dead) == (40, 40, 0)
    recs = await records(sentinel_client, prefix, job_id)
    assert sorted(r["url"] for r in recs) == sorted(urls)
    assert {r["url"]: r["name"] for r in recs} == {u: expected[u]["name"] for u in urls}
    assert sum(fetched.values()) == 40 and set(fetched.values()) == {1}  # no failover: no page twice


async def test_master_killed_mid_job_replica_promoted_and_no_record_is_lost(
    redis_sentinel: LocalRedisSentinel,
    sentinel_client: aioredis.Redis,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
    record_property: Any,
) -> None:
    prefix = pool_prefix(NS, "failover")
    master = redis_sentinel.master_port()
    with Bookstore(host=HOST, latency=0.05) as site:
        # the second half answers 2 s late, so the job still runs when the master dies
        urls = [site.product_url(i) + ("?delay=2" if i > 50 else "") for i in range(1, 101)]
        job_id, queue = await submit(sentinel_client, prefix, urls)
        ports = procs.free_ports(2)
        for n in range(2):
            start_worker(
                workers,
                worker_redis_args(redis_sentinel),
                prefix,
                f"failover-{n}",
                tmp_path,
                metrics_port=ports[n],
                **WORKER_OPTIONS,
            )
        deadline = time.monotonic() + 60
        while (await queue.job_stats(job_id)).succeeded < 25:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert not (await queue.job_stats(job_id)).finished  # really mid-job
        killed_at = time.monotonic()
        redis_sentinel.kill(master)
        try:
            promoted = await asyncio.to_thread(redis_sentinel.wait_promoted, master, 60)
            took_over = time.monotonic() - killed_at
            await wait_finished(queue, job_id, 120)
            finished_after = time.monotonic() - killed_at
            fetched = Counter(e.path for e in site.entries() if e.path != "/robots.txt")
            reported = sum(duplicate_records(p) for p in ports)
        finally:
            redis_sentinel.restart(master)  # the Sentinels make it a replica of the promoted node
    assert promoted != master
    assert all(w.poll() is None for w in workers)  # the workers rode over the failover
    recs = await records(sentinel_client, prefix, job_id)
    got = Counter(r["url"] for r in recs)
    stats = await queue.job_stats(job_id)
    lost = set(urls) - set(got)
    duplicates = sum(fetched.values()) - len(urls)
    record_property("failover_seconds", round(took_over, 2))
    record_property("finished_after_kill_seconds", round(finished_after, 2))
    record_property("duplicate_fetches", duplicates)
    record_property("duplicate_records_reported", reported)
    print(
        f"Sentinel failover {took_over:.2f}s, finished {finished_after:.2f}s after the kill, {duplicates} "
        f"duplicate fetches, {reported} reported by the workers (trawl_worker_duplicate_records_total)"
    )
    assert not lost, f"lost result records: {sorted(lost)[:5]}"
    assert set(got.values()) == {1}  # every URL exactly once in the results
    assert stats.succeeded + stats.dead == 100 and stats.dead == 0
    assert len(fetched) == 100 and reported_within(reported, duplicates, len(workers))
    await asyncio.to_thread(redis_sentinel.wait_healthy, 60)
