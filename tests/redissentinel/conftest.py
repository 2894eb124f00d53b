"""Fixtures of the Redis Sentinel layer: one real deployment (a master, a replica, three Sentinels) per
session; the operator's fixtures are those of tests/rediscluster (a real kube-apiserver and etcd)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from rsentinel_helpers import MASTER_NAME, target

from trawl.dev.redis_sentinel import LocalRedisSentinel
from trawl.redisconn.client import connect

# the cluster layer's helpers (objects, waits) serve the operator test here too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))
from kube_fixtures import control_plane, namespace, operator, supervisor

__all__ = ["control_plane", "namespace", "operator", "supervisor"]


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[LocalRedisSentinel]:
    with LocalRedisSentinel(master_name=MASTER_NAME) as deployment:
        yield deployment


@pytest.fixture
async def sentinel_client(redis_sentinel: LocalRedisSentinel) -> AsyncIterator[aioredis.Redis]:
    """A client of the master through the Sentinels, on a healthy, flushed deployment (a test before may
    have failed the master over)."""
    redis_sentinel.wait_healthy(60)
    client = connect("", sentinel=target(redis_sentinel))
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()
