"""The pool pass's read of how full Redis is, against a real redis-server: the figures Redis counts, a
full Redis under noeviction, an evicting policy, and a user whose ACL denies INFO (no check, no error)."""

from __future__ import annotations

import redis.asyncio as aioredis

from trawl.dev.redis_server import RedisServer
from trawl.redisconn.client import connect
from trawl.redisconn.memory import read_memory


async def test_full_evicting_and_denied(redis_server: RedisServer, redis_client: aioredis.Redis) -> None:
    memory = await read_memory(redis_client)
    assert memory is not None and memory.used > 0 and memory.limit == 0 and not (memory.full or memory.evicts)
    try:
        await redis_client.config_set("maxmemory", str(memory.used // 2))
        full = await read_memory(redis_client)
        assert full is not None and full.full and full.limit == memory.used // 2
        await redis_client.config_set("maxmemory-policy", "allkeys-lru")
        await redis_client.config_set("maxmemory", str(1 << 30))
        evicting = await read_memory(redis_client)
        assert evicting is not None and evicting.evicts and evicting.policy == "allkeys-lru" and not evicting.full
    finally:
        await redis_client.config_set("maxmemory-policy", "noeviction")
        await redis_client.config_set("maxmemory", "0")

    await redis_client.acl_setuser("noinfo", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-info"])
    limited = connect(redis_server.url, password="pw", username="noinfo")
    try:
        assert await limited.ping()
        assert await read_memory(limited) is None  # denied: the pool works on without the check
    finally:
        await limited.aclose()
        await redis_client.acl_deluser("noinfo")
