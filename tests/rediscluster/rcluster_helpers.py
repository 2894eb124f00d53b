"""Helpers of the Redis Cluster layer's tests."""

from __future__ import annotations

from redis.crc import key_slot

from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.queue.keys import pool_prefix


def pool_on_master(cluster: LocalRedisCluster, port: int, namespace: str = "rc", base: str = "pool") -> str:
    """A pool name whose hash tag maps to a slot of the master on ``port``."""
    owner = next(n for n in cluster.nodes() if n.master and not n.failed and n.port == port)
    for i in range(10_000):
        name = f"{base}-{i}"
        if owner.owns(key_slot(pool_prefix(namespace, name).encode())):
            return name
    raise LookupError(f"no pool name lands on master {port}")


def worker_redis_args(cluster: LocalRedisCluster) -> list[str]:
    """How `trawl worker` is told to use the cluster."""
    return ["--redis-url", cluster.url, "--redis-cluster"]
