"""How full a Redis Cluster is, as the operator's pool pass reads it: INFO memory of every primary, the
fullest one counting (a pool's keys live on the one primary of its hash tag's slot)."""

from __future__ import annotations

import redis.asyncio as aioredis

from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.redisconn.memory import read_memory


async def test_the_fullest_primary_decides(redis_cluster: LocalRedisCluster, cluster_client: aioredis.Redis) -> None:
    memory = await read_memory(cluster_client)
    assert memory is not None and memory.limit == 0 and not memory.full and not memory.evicts
    master = next(n for n in redis_cluster.nodes() if n.master and not n.failed)
    used = int(redis_cluster.command(master.port, "INFO", "memory")["used_memory"])
    try:
        redis_cluster.command(master.port, "CONFIG", "SET", "maxmemory", str(used // 2))
        full = await read_memory(cluster_client)
        assert full is not None and full.full and full.limit == used // 2
    finally:
        redis_cluster.command(master.port, "CONFIG", "SET", "maxmemory", "0")
    after = await read_memory(cluster_client)
    assert after is not None and not after.full
