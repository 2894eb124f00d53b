"""The queue on a real 6-node Redis Cluster: pools on different masters, every transition with exact
counts, scripts reloaded on a node that lost them (NOSCRIPT), a slot moved under a running job (MOVED,
ASK, TRYAGAIN followed by the client)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from rcluster_helpers import pool_on_master
from redis.crc import key_slot

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.dev.redis_server import RedisServer
from trawl.operator.connections import RedisConnections
from trawl.operator.secrets import RedisConfigError
from trawl.queue import JobConfig, Queue, RetryPolicy
from trawl.queue.keys import Keys, pool_prefix
from trawl.sinks.base import Record
from trawl.sinks.digests import COUNT_FIELD
from trawl.sinks.jsonlines import JsonLinesSink
from trawl.sinks.redisstream import dedupe_key

NS = "rc"


def _keys_on(port: int, pattern: str) -> list[bytes]:
    c = redis.Redis(port=port)
    try:
        return list(c.scan_iter(match=pattern, count=1000))
    finally:
        c.close()


async def _run_job_exactly(q: Queue, clock: list[float], job_id: str) -> None:
    """30 URLs: 20 acked, 5 failed and retried then acked, 5 failed for good (dead letters)."""
    await q.register_job(JobConfig(job_id, retry=RetryPolicy(max_attempts=3, initial_delay=1, jitter=0)))
    assert await q.enqueue(job_id, [f"https://site/{i}" for i in range(30)], start_index=0) == 30
    assert await q.enqueue(job_id, [f"https://site/{i}" for i in range(30)], start_index=0) == 0  # idempotent
    await q.mark_enqueue_done(job_id)
    tasks = await q.claim("w@1", 30)
    assert len(tasks) == 30
    assert all(await q.ack_many(tasks[:20], "w@1"))
    for t in tasks[20:25]:
        assert not (await q.fail(t, "w@1", "Timeout", "slow")).dead_lettered
    for t in tasks[25:]:
        assert (await q.fail(t, "w@1", "HTTP4xx", "404")).dead_lettered
    clock[0] += 5  # the retries are due
    again = await q.claim("w@2", 30)
    assert sorted(t.url for t in again) == sorted(t.url for t in tasks[20:25])
    assert all(t.attempt == 2 for t in again)
    assert all(await q.ack_many(again, "w@2"))
    stats = await q.job_stats(job_id)
    assert (stats.total, stats.succeeded, stats.dead, stats.pending, stats.in_flight) == (30, 25, 5, 0, 0)
    assert stats.finished
    dead = await q.dead_letters(job_id)
    assert sorted(d.url for d in dead) == sorted(t.url for t in tasks[25:])
    assert await q.requeue_dead(job_id) == 5
    last = await q.claim("w@3", 30)
    assert len(last) == 5 and all(await q.ack_many(last, "w@3"))
    assert (await q.job_stats(job_id)).succeeded == 30


async def test_pools_on_three_masters_run_every_transition_with_exact_counts(
    redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis
) -> None:
    masters = [n for n in redis_cluster.nodes() if n.master and n.slots]
    assert len(masters) == 3
    clock = [1_000_000.0]
    pools = {m.port: pool_on_master(redis_cluster, m.port, NS) for m in masters}
    queues = {
        port: Queue(cluster_client, pool_prefix(NS, name), clock=lambda: clock[0], lease_seconds=30)
        for port, name in pools.items()
    }
    await asyncio.gather(*(_run_job_exactly(q, clock, f"job-{i}") for i, q in enumerate(queues.values())))
    for port, name in pools.items():
        prefix = pool_prefix(NS, name)
        slot = int(await cluster_client.cluster_keyslot(Keys(prefix).job("job-0")))
        assert slot == key_slot(prefix.encode())
        assert redis_cluster.master_for_slot(slot).port == port
        # the pool's keys are on its master, and on no other master
        for other in masters:
            found = _keys_on(other.port, f"{glob_escape(prefix)}*")
            assert bool(found) == (other.port == port), (other.port, port, found[:3])


def glob_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


async def test_scripts_are_loaded_again_on_a_node_that_lost_them(
    redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis
) -> None:
    q = Queue(cluster_client, pool_prefix(NS, "noscript"))
    await q.register_job(JobConfig("j"))
    await q.enqueue("j", ["https://a/1", "https://a/2"])
    for port in redis_cluster.ports:  # every node forgets every script (as a restarted node has)
        c = redis.Redis(port=port)
        try:
            c.script_flush()
        finally:
            c.close()
    tasks = await q.claim("w@1", 10)  # NOSCRIPT -> SCRIPT LOAD -> EVALSHA, by the client
    assert len(tasks) == 2
    assert all(await q.ack_many(tasks, "w@1"))
    assert (await q.job_stats("j")).succeeded == 2


async def test_a_slot_moved_to_another_master_under_a_running_job(
    redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis
) -> None:
    """Every key of the pool moves to another master while claims and acks run: the client follows the
    ASK/TRYAGAIN replies during the move and MOVED after it; nothing is lost or done twice."""
    name = "moving"
    prefix = pool_prefix(NS, name)
    slot = key_slot(prefix.encode())
    q = Queue(cluster_client, prefix)
    await q.register_job(JobConfig("j"))
    urls = [f"https://a/{i}" for i in range(600)]
    await q.enqueue("j", urls)
    await q.mark_enqueue_done("j")
    acked: list[str] = []
    stop = asyncio.Event()
    under_way = asyncio.Event()

    async def work() -> None:
        while not stop.is_set():
            tasks = await q.claim("w@1", 5)
            if not tasks:
                await asyncio.sleep(0.01)
                continue
            ok = await q.ack_many(tasks, "w@1")
            acked.extend(t.url for t, a in zip(tasks, ok, strict=True) if a)
            if len(acked) >= 50:
                under_way.set()

    worker = asyncio.create_task(work())
    try:
        await asyncio.wait_for(under_way.wait(), 60)
        src = redis_cluster.master_for_slot(slot)
        dst = next(n for n in redis_cluster.nodes() if n.master and n.slots and n.port != src.port)
        await asyncio.to_thread(_migrate_slot, slot, src.port, src.node_id, dst.port, dst.node_id, redis_cluster)
        assert redis_cluster.master_for_slot(slot).port == dst.port
        while not (await q.job_stats("j")).finished:
            assert not worker.done(), worker
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(worker, 30)
    assert sorted(acked) == sorted(urls)  # each URL acked once
    stats = await q.job_stats("j")
    assert (stats.succeeded, stats.pending, stats.in_flight, stats.dead) == (600, 0, 0, 0)
    assert _keys_on(src.port, f"{glob_escape(prefix)}*") == []


def _migrate_slot(slot: int, src: int, src_id: str, dst: int, dst_id: str, cluster: LocalRedisCluster) -> None:
    """What ``redis-cli --cluster reshard`` does for one slot, a few keys at a time (so the workload
    meets the half-moved state: ASK for moved keys, TRYAGAIN for a script whose keys are split)."""
    s, d = redis.Redis(port=src), redis.Redis(port=dst)
    try:
        d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while True:
            keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 2)
            if not keys:
                break
            s.execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
        for port in cluster.ports:
            c = redis.Redis(port=port)
            with contextlib.suppress(redis.RedisError):
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            c.close()
    finally:
        s.close()
        d.close()


async def test_the_sinks_pipelines_run_on_a_cluster(cluster_client: aioredis.Redis, tmp_path: Path) -> None:
    """The JSON Lines sink's dedupe scripts (their keys in one slot) run on a cluster; a record is written
    once however often it comes."""
    prefix = pool_prefix(NS, "sinks")
    sink = JsonLinesSink(cluster_client, lambda job: dedupe_key(Keys(prefix).results(job)), str(tmp_path))
    recs = [Record("j", f"https://a/{i}", {"key": f"k{i}", "url": f"https://a/{i}"}) for i in range(3)]
    assert await sink.write("j", recs) == 3
    assert await sink.write("j", recs) == 0
    assert len(sink.path("j").read_text().splitlines()) == 3
    key = Keys(prefix).results_digests("j")
    assert await cluster_client.hget(key, COUNT_FIELD) == b"3" and await cluster_client.ttl(key) > 0


async def test_a_mode_that_does_not_match_the_server_is_a_config_error(
    redis_cluster: LocalRedisCluster, redis_server: RedisServer
) -> None:
    """mode Standalone on a cluster node (whose MOVED replies a single-server client would not follow)
    and mode Cluster on a single server are both told as configuration errors, naming what to set."""
    connections = RedisConnections()
    try:
        on_cluster = ScrapePoolSpec.model_validate({"redis": {"url": redis_cluster.url}})
        with pytest.raises(RedisConfigError, match=r"is a Redis Cluster node: set spec\.redis\.mode: Cluster"):
            await connections.for_pool("ns", "a", on_cluster, {})
        on_server = ScrapePoolSpec.model_validate({"redis": {"url": redis_server.url, "mode": "Cluster"}})
        with pytest.raises(RedisConfigError, match=r"is not a Redis Cluster but spec\.redis\.mode is Cluster"):
            await connections.for_pool("ns", "b", on_server, {})
        right = ScrapePoolSpec.model_validate({"redis": {"url": redis_cluster.url, "mode": "Cluster"}})
        assert await (await connections.for_pool("ns", "c", right, {})).ping()
    finally:
        await connections.close()
