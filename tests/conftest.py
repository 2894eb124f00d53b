"""Fixtures shared by every layer: real servers started on loopback and always stopped."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from skip_check import register as register_skip_check
from trawl.dev import procs
from trawl.dev.redis_server import RedisServer
from trawl.redisconn.client import connect

# Prometheus's default port and the worker template's default metrics port.
HELD_PORT = 9090


def pytest_configure(config: pytest.Config) -> None:
    """`make test` fails on a skipped test unless tests/skip_check.py allows it (TRAWL_CHECK_SKIPS=1)."""
    register_skip_check(config)


@pytest.fixture(scope="session", autouse=True)
def _hold_port_9090() -> Iterator[None]:
    """The whole run holds 127.0.0.1:9090, as a machine running Prometheus does: nothing in the suite may
    depend on a fixed port being free. If another process holds it already, so much the better."""
    holder: socket.socket | None = socket.socket()
    assert holder is not None
    try:
        holder.bind(("127.0.0.1", HELD_PORT))
        holder.listen()
    except OSError:
        holder.close()
        holder = None
    try:
        yield
    finally:
        if holder is not None:
            holder.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server per test session (tests isolate themselves with FLUSHALL)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """An asyncio client on a flushed database, built as a worker builds it: its commands share one
    connection (trawl.redisconn.mux). tests/integration/test_queue_behaviour.py runs the queue on redis-py's
    pooled client too, as the operator and the CLI use it."""
    client = connect(redis_server.url, multiplex=True)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def shared_redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A pooled asyncio client on a flushed database, as the operator and the CLI build theirs (a blocking
    read takes a connection of its own)."""
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def site_options() -> dict[str, Any]:
    """Arguments of Bookstore laid over those of the layer's bookstore fixture (sites.py); none here. A test
    module that needs another shape of the site overrides this fixture."""
    return {}


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes a test starts (worker_procs.start_worker appends them here): all stopped at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        procs.stop(proc, timeout=10)


_LAYERS = {
    "unit": "unit",
    "setup": "setup",
    "integration": "redis",
    "browser": "browser",
    "sinks": "sinks",
    "cluster": "cluster",
    "rediscluster": "rediscluster",
    "redissentinel": "redissentinel",
    "faults": "faults",
    "e2e": "e2e",
    "e2e_kind": "e2e_kind",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test belongs to exactly one layer, given by its folder: tests/unit -> unit, and so on."""
    for item in items:
        parts = item.path.parts
        layer = next((_LAYERS[p] for p in parts if p in _LAYERS), None)
        if layer is None:
            raise pytest.UsageError(f"{item.nodeid} is outside the layer folders tests/{{{','.join(_LAYERS)}}}")
        item.add_marker(getattr(pytest.mark, layer))
