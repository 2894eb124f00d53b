"""Redis Cluster readiness: every key of a pool maps to one slot, and every script runs on a cluster-mode
server (which rejects a script touching a key outside the slot of its declared keys)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from trawl.dev.procs import free_port
from trawl.dev.redis_server import RedisServer
from trawl.queue import JobConfig, Queue, RetryPolicy
from trawl.queue.keys import Keys, pool_prefix


async def exercise_every_script(q: Queue, clock: list[float]) -> None:
    """Run every transition (every .lua file) at least once, including the keys built inside scripts."""
    await q.register_job(JobConfig("job-a", retry=RetryPolicy(max_attempts=2, initial_delay=1, jitter=0)))
    await q.register_job(JobConfig("job-b", priority=7, max_pages=50, max_depth=2, dedupe_across_jobs=True))
    await q.enqueue("job-a", [f"https://a/{i}" for i in range(20)])
    await q.enqueue("job-b", [f"https://b/{i}" for i in range(5)])
    await q.mark_enqueue_done("job-a")
    tasks = await q.claim("w1", 10)
    await q.heartbeat("w1", in_flight=len(tasks))
    parent = next(t for t in tasks if t.job_id == "job-b")
    assert await q.enqueue_discovered(parent, ["https://b/x", "https://b/y"]) == 2
    a_tasks = [t for t in tasks if t.job_id == "job-a"]
    assert len(a_tasks) >= 3
    await q.ack_many([t for t in tasks if t not in a_tasks[:3]], "w1")
    await q.fail(a_tasks[0], "w1", "Timeout", "slow")  # retried: delayed set + index
    await q.fail(a_tasks[1], "w1", "HTTP4xx", "404")  # dead letter
    await q.release(a_tasks[2], "w1", delay=1)
    clock[0] += 2
    more = await q.claim("w2", 5)  # promotes the delayed tasks
    assert more
    await q.suspend("job-a")
    await q.resume("job-a")
    assert await q.requeue_dead("job-a") == 1
    clock[0] += 100
    await q.claim("w3", 1)  # reaps w1/w2 (lease expired)
    assert await q.reap() == 0
    await q.pool_signals()
    await q.retire_worker("w1")
    await q.dead_letters("job-a")
    await q.job_stats("job-a")
    await q.expire_job("job-b", 100)
    await q.cancel("job-a")


def test_every_key_of_a_pool_maps_to_one_slot() -> None:
    k = Keys(pool_prefix("team-a", "pool-1"))
    names = [
        *k.pool_keys(),
        k.worker("w-1"),
        k.worker_claim("w-1"),
        k.rate_limit("example.com"),
        k.rate_limit("example.com", "conc"),
        *k.job_keys("2f0c1c8e-0000-4000-8000-000000000000"),
    ]
    assert len({key_slot(n.encode()) for n in names}) == 1
    assert key_slot(k.stats.encode()) == key_slot(b"team-a/pool-1")
    with pytest.raises(ValueError):
        Keys("trawl:no-tag")


async def test_scripts_touch_only_their_pools_slot(redis_client: aioredis.Redis) -> None:
    clock = [1_800_000_000.0]
    qa = Queue(redis_client, pool_prefix("ns", "pool-a"), lease_seconds=10, clock=lambda: clock[0])
    qb = Queue(redis_client, pool_prefix("ns", "pool-b"), lease_seconds=10, clock=lambda: clock[0])
    await exercise_every_script(qa, clock)
    await exercise_every_script(qb, clock)
    slots: dict[int, list[str]] = {}
    for raw in await redis_client.keys("*"):
        slots.setdefault(key_slot(raw), []).append(raw.decode())
    assert len(slots) == 2, slots  # one slot per pool, whatever the scripts created
    assert {s for s in slots} == {key_slot(b"ns/pool-a"), key_slot(b"ns/pool-b")}


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
async def cluster_client() -> AsyncIterator[aioredis.Redis]:
    # A cluster node also listens on port + 10000 (its bus): pick a port where both fit and are free.
    port = free_port()
    while port + 10000 > 65535 or not _port_free(port + 10000):
        port = free_port()
    server = RedisServer(port=port, extra_args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
    server.start(timeout=30)
    client = aioredis.Redis.from_url(server.url)
    try:
        server.wait_ready(timeout=30)
        await client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        for _ in range(600):
            info = (await client.execute_command("CLUSTER", "INFO")).decode()
            if "cluster_state:ok" in info:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("single-node cluster did not become ready")
        yield client
    finally:
        await client.aclose()
        server.stop()


async def test_every_script_runs_on_a_cluster_mode_server(cluster_client: aioredis.Redis) -> None:
    clock = [1_800_000_000.0]
    q = Queue(cluster_client, pool_prefix("ns", "pool"), lease_seconds=10, clock=lambda: clock[0])
    await exercise_every_script(q, clock)
    # Sanity check that the server does enforce slots: a script touching two slots is refused.
    with pytest.raises(Exception, match=r"(?i)slot"):
        await cluster_client.eval("#!lua\nredis.call('SET', KEYS[1], 1); redis.call('SET', 'other{x}', 1)", 1, "k{y}")
