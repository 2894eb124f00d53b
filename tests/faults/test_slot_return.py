"""A per-domain concurrency slot given back while Redis does not answer is returned once it answers again.

Before, the worker only logged "could not return slot" and left the lease to expire: after a Redis outage
or a Sentinel/Cluster failover the domain's slots stayed taken for up to ``SLOT_LEASE_MS`` (30 s), and a
domain limited to one request at a time stalled for all workers that long.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from trawl.dev import procs
from trawl.dev.redis_server import RedisServer
from trawl.worker.politeness import DomainLimiter, RateWaitTooLong
from trawl.worker.politeness.slots import SLOT_LEASE_MS


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{faults/slots}}:{kind}:{domain}"


def _redis(workdir: Path, port: int = 0) -> RedisServer:
    # every write on disk before its reply, so a killed server comes back with the lease it granted
    server = RedisServer(port=port, workdir=workdir, extra_args=["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    server.wait_ready()
    return server


async def test_a_slot_given_back_while_redis_is_down_is_returned_at_the_next_refresh(tmp_path: Path) -> None:
    server = _redis(tmp_path)
    a_client = aioredis.Redis.from_url(server.url, socket_timeout=2.0)
    b_client = aioredis.Redis.from_url(server.url, socket_timeout=5.0)
    a = DomainLimiter(a_client, _key, "worker-a")
    b = DomainLimiter(b_client, _key, "worker-b")
    conc = _key("site", "conc")
    try:
        async with a.slot("site", 1):
            assert await b_client.zcard(conc) == 1
            assert server.proc is not None
            procs.signal_group(server.proc, signal.SIGKILL)  # Redis goes away mid-request
            server.proc.wait(10)
        await a.slots.flush()  # its batch of returns, due RETURN_SECONDS after the give-back, goes now
        # The give-back failed (connection refused). Redis comes back with its data: the lease is there.
        server = _redis(tmp_path, server.port)
        leases = await b_client.zrange(conc, 0, -1, withscores=True)
        assert len(leases) == 1
        server_ms = (await b_client.time())[0] * 1000
        assert leases[0][1] > server_ms + SLOT_LEASE_MS / 2, "the lease would have held the slot for long"
        with pytest.raises(RateWaitTooLong):  # the other worker cannot have the slot
            async with b.slot("site", 1, deadline=time.monotonic() + 0.5):
                pass

        await a.refresh()  # the heartbeat loop's call: the slot goes back now, not when its lease ends
        assert await b_client.zcard(conc) == 0
        async with b.slot("site", 1, deadline=time.monotonic() + 5.0):
            assert await b_client.zcard(conc) == 1
        await b.slots.flush()
        assert await b_client.zcard(conc) == 0
    finally:
        await a_client.aclose()
        await b_client.aclose()
        server.stop()
