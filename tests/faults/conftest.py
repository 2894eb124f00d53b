"""Fixtures of the fault-injection suite (helpers in fault_harness.py); everything they start is stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from fault_harness import HOST, Workers

from sites import bookstore_fixture
from trawl.dev.redis_server import RedisServer


@pytest.fixture
def workers_factory(tmp_path: Path) -> Iterator[list[Workers]]:
    made: list[Workers] = []
    yield made
    for w in made:
        w.stop_all()


site = bookstore_fixture("function", host=HOST, latency=0.25)


@pytest.fixture
async def shared_redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()
