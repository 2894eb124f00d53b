"""The workers' Redis parser (trawl.redisconn.client.Resp2Parser): a connection the server closed is still
noticed before the next command, without redis-py's per-command timer."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from trawl.dev.redis_server import RedisServer
from trawl.redisconn.client import Resp2Parser, connect


async def test_a_connection_the_server_closed_is_replaced_before_the_next_command(
    redis_server: RedisServer, redis_client: aioredis.Redis
) -> None:
    client = connect(redis_server.url)
    try:
        assert client.connection_pool.connection_kwargs["parser_class"] is Resp2Parser
        assert await client.ping()
        (conn,) = client.connection_pool._available_connections  # type: ignore[attr-defined]
        assert await conn.can_read_destructive() is False  # idle and open: ready for a command
        await redis_client.client_kill_filter(_id=await client.client_id())
        deadline = time.monotonic() + 10
        while not await conn.can_read_destructive():  # the server's close reaches the stream
            assert time.monotonic() < deadline, "the closed connection was never noticed"
            await asyncio.sleep(0.01)
        # The pool sees it before sending, reconnects, and the command succeeds on a fresh connection.
        assert await client.incr("parser:n") == 1
        assert await client.client_id() != 0
    finally:
        await client.aclose()
