"""`trawl worker --redis-cluster` as real processes on a 6-node Redis Cluster: two pools on two masters
drain with exact counts; a master SIGKILLed mid-job is replaced by its replica, the workers reconnect,
the job completes with every record exactly once, and the duplicate fetches are counted."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from rcluster_helpers import pool_on_master, worker_redis_args
from redis.crc import key_slot

from failover_workers import HOST, WORKER_OPTIONS, duplicate_records, records, reported_within, submit, wait_finished
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.queue.keys import pool_prefix
from worker_procs import start_worker

NS = "rcw"


async def test_two_pools_on_two_masters_drain_with_exact_counts(
    redis_cluster: LocalRedisCluster,
    cluster_client: aioredis.Redis,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    masters = [n for n in redis_cluster.nodes() if n.master and n.slots][:2]
    prefixes = [pool_prefix(NS, pool_on_master(redis_cluster, m.port, NS)) for m in masters]
    with Bookstore(host=HOST) as site:
        jobs = [
            await submit(cluster_client, prefix, [site.product_url(i) for i in range(1 + 30 * n, 31 + 30 * n)])
            for n, prefix in enumerate(prefixes)
        ]
        for n, prefix in enumerate(prefixes):
            start_worker(
                workers,
                worker_redis_args(redis_cluster),
                prefix,
                f"drain-{n}",
                tmp_path,
                metrics_port=0,
                **WORKER_OPTIONS,
            )
        for job_id, queue in jobs:
            await wait_finished(queue, job_id, 90)
        fetched = Counter(e.path for e in site.entries() if e.path != "/robots.txt")
        expected = site.expected()
    for n, ((job_id, queue), prefix) in enumerate(zip(jobs, prefixes, strict=True)):
        stats = await queue.job_stats(job_id)
        assert (stats.total, stats.succeeded, stats.dead) == (30, 30, 0)
        recs = await records(cluster_client, prefix, job_id)
        urls = [r["url"] for r in recs]
        assert len(urls) == len(set(urls)) == 30
        assert {r["url"]: r["name"] for r in recs} == {u: expected[u]["name"] for u in urls}
        assert redis_cluster.master_for_slot(key_slot(prefix.encode())).port == masters[n].port
    assert sum(fetched.values()) == 60 and set(fetched.values()) == {1}  # no failover: no page twice


async def test_master_killed_mid_job_replica_takes_over_and_no_record_is_lost(
    redis_cluster: LocalRedisCluster,
    cluster_client: aioredis.Redis,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
    record_property: Any,
) -> None:
    master = next(n for n in redis_cluster.nodes() if n.master and n.slots)
    prefix = pool_prefix(NS, pool_on_master(redis_cluster, master.port, NS, base="failover"))
    slot = key_slot(prefix.encode())
    with Bookstore(host=HOST, latency=0.05) as site:
        urls = [site.product_url(i) for i in range(1, 101)]
        job_id, queue = await submit(cluster_client, prefix, urls)
        ports = procs.free_ports(2)
        for n in range(2):
            start_worker(
                workers,
                worker_redis_args(redis_cluster),
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
        redis_cluster.kill(master.port)
        try:
            promoted = await asyncio.to_thread(redis_cluster.wait_promoted, slot, master.port, 60)
            took_over = time.monotonic() - killed_at
            await wait_finished(queue, job_id, 120)
            finished_after = time.monotonic() - killed_at
            fetched = Counter(e.path for e in site.entries() if e.path != "/robots.txt")
            reported = sum(duplicate_records(p) for p in ports)
        finally:
            redis_cluster.restart(master.port)  # it rejoins as a replica of the promoted node
    assert promoted.port != master.port
    assert all(w.poll() is None for w in workers)  # the workers rode over the failover
    recs = await records(cluster_client, prefix, job_id)
    got = Counter(r["url"] for r in recs)
    stats = await queue.job_stats(job_id)
    lost = set(urls) - set(got)
    duplicates = sum(fetched.values()) - len(urls)
    record_property("failover_seconds", round(took_over, 2))
    record_property("finished_after_kill_seconds", round(finished_after, 2))
    record_property("duplicate_fetches", duplicates)
    record_property("duplicate_records_reported", reported)
    print(
        f"failover {took_over:.2f}s, finished {finished_after:.2f}s after the kill, {duplicates} duplicate "
        f"fetches, {reported} reported by the workers (trawl_worker_duplicate_records_total)"
    )
    assert not lost, f"lost result records: {sorted(lost)[:5]}"
    assert set(got.values()) == {1}  # every URL exactly once in the results
    assert stats.succeeded + stats.dead == 100 and stats.dead == 0
    assert len(fetched) == 100 and reported_within(reported, duplicates, len(workers))
    await asyncio.to_thread(redis_cluster.wait_healthy, 60)
