"""Fixtures shared by every layer: real servers started on loopback and always stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from trawl.dev.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server per test session (tests isolate themselves with FLUSHALL)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """An asyncio client on a flushed database."""
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


_LAYERS = {
    "unit": "unit",
    "setup": "setup",
    "integration": "redis",
    "cluster": "cluster",
    "e2e_kind": "e2e_kind",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test belongs to exactly one layer, given by its folder: tests/unit -> unit, and so on."""
    for item in items:
        parts = item.path.parts
        layer = next((_LAYERS[p] for p in parts if p in _LAYERS), None)
        if layer is None:
            raise pytest.UsageError(f"{item.nodeid} is outside tests/unit, setup, integration, cluster or e2e_kind")
        item.add_marker(getattr(pytest.mark, layer))
