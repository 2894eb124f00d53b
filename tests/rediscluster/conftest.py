"""Fixtures of the Redis Cluster layer: one real 6-node cluster (3 masters, 3 replicas) per session."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.redisconn.client import connect

# the cluster layer's helpers (objects, waits) serve the operator test here too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))
from kube_fixtures import control_plane, namespace, operator, supervisor

__all__ = ["control_plane", "namespace", "operator", "supervisor"]


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas_per_master=1, node_timeout_ms=1500) as cluster:
        yield cluster


@pytest.fixture
async def cluster_client(redis_cluster: LocalRedisCluster) -> AsyncIterator[aioredis.Redis]:
    """A cluster client on a healthy, flushed cluster (a test before may have failed a master over)."""
    redis_cluster.wait_healthy(60)
    client = connect(redis_cluster.url, cluster=True)
    await client.flushall()  # the cluster client sends it to every master
    try:
        yield client
    finally:
        await client.aclose()
