"""Helpers of the Redis Sentinel layer's tests."""

from __future__ import annotations

from trawl.dev.redis_sentinel import LocalRedisSentinel
from trawl.redisconn.sentinel import SentinelTarget

MASTER_NAME = "m"


def target(deployment: LocalRedisSentinel, master_name: str = MASTER_NAME) -> SentinelTarget:
    """Where the deployment's master is found, as the pools' settings say it."""
    return SentinelTarget.parse(deployment.sentinel_addresses, master_name)


def worker_redis_args(deployment: LocalRedisSentinel, master_name: str = MASTER_NAME) -> list[str]:
    """How `trawl worker` is told to find the deployment's master."""
    return ["--redis-sentinels", ",".join(deployment.sentinel_addresses), "--redis-sentinel-master", master_name]
