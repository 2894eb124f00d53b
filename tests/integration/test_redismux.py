"""The multiplexed client (trawl.redisconn.mux) against a real redis-server: every command gets its own reply,
whatever fails, stops or is cancelled on the shared connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.exceptions as rexc

from trawl.dev.redis_server import RedisServer
from trawl.redisconn.client import connect
from trawl.redisconn.mux import MultiplexedRedis


@pytest.fixture(scope="module")
def debug_server() -> Iterator[RedisServer]:
    """A server of its own that takes DEBUG SLEEP (to hold a reply back)."""
    with RedisServer(extra_args=["--enable-debug-command", "local"]) as server:
        yield server


@pytest.fixture
async def mux(debug_server: RedisServer) -> AsyncIterator[MultiplexedRedis]:
    client = connect(debug_server.url, multiplex=True)
    assert isinstance(client, MultiplexedRedis)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


async def _clients(r: MultiplexedRedis) -> int:
    info = await r.info("clients")
    return int(info["connected_clients"])


async def test_concurrent_commands_each_get_their_own_reply_on_one_connection(mux: MultiplexedRedis) -> None:
    before = await _clients(mux)

    async def slot(i: int) -> list[object]:
        got: list[object] = []
        for n in range(50):
            await mux.set(f"k{i}", f"{i}:{n}")
            got.append(await mux.get(f"k{i}"))
            got.append(await mux.incr(f"c{i}"))
        return got

    results = await asyncio.gather(*(slot(i) for i in range(32)))
    for i, got in enumerate(results):
        assert got[0::2] == [f"{i}:{n}".encode() for n in range(50)]
        assert got[1::2] == list(range(1, 51))
    assert await _clients(mux) == before  # 32 coroutines, still the one connection


async def test_an_error_reply_fails_only_its_own_command(mux: MultiplexedRedis) -> None:
    await mux.set("s", "text")

    async def bad() -> object:
        return await mux.incr("s")  # WRONGTYPE-like: not an integer

    results = await asyncio.gather(mux.incr("n"), bad(), mux.get("s"), mux.incr("n"), return_exceptions=True)
    assert results[0] == 1 and results[2] == b"text" and results[3] == 2
    assert isinstance(results[1], rexc.ResponseError)
    assert await mux.hset("h", mapping={"a": "1"}) == 1 and await mux.hgetall("h") == {b"a": b"1"}  # callbacks


async def test_scripts_reload_after_the_server_forgets_them(mux: MultiplexedRedis) -> None:
    script = mux.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert await script(keys=["x"], args=[2]) == 2
    await mux.script_flush()
    assert await script(keys=["x"], args=[3]) == 5  # NOSCRIPT raised on the shared line, then loaded


async def test_a_cancelled_caller_does_not_shift_the_replies_of_the_others(mux: MultiplexedRedis) -> None:
    slow = asyncio.create_task(mux.execute_command("DEBUG", "SLEEP", "0.3"))
    await asyncio.sleep(0.05)
    behind = asyncio.create_task(mux.incr("after"))
    await asyncio.sleep(0.05)
    slow.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await slow
    assert await behind == 1
    assert await mux.get("after") == b"1"


async def test_a_blocking_command_takes_its_own_connection(mux: MultiplexedRedis) -> None:
    waiting = asyncio.create_task(mux.blpop(["q"], timeout=5))
    await asyncio.sleep(0.1)
    assert await mux.incr("meanwhile") == 1  # not stuck behind the BLPOP
    await mux.rpush("q", "v")
    assert await asyncio.wait_for(waiting, 10) == (b"q", b"v")


async def test_a_reply_that_does_not_come_in_time_fails_and_the_next_command_reconnects(
    debug_server: RedisServer,
) -> None:
    client = connect(debug_server.url, multiplex=True, socket_timeout=0.2)
    try:
        with pytest.raises(rexc.TimeoutError):
            await client.execute_command("DEBUG", "SLEEP", "0.6")
        for _ in range(100):  # the server answers again once its sleep is over
            with contextlib.suppress(rexc.TimeoutError):
                assert await client.ping() is True
                break
            await asyncio.sleep(0.1)
        assert await client.incr("later") == 1 and await client.incr("later") == 2
    finally:
        await client.aclose()


async def test_a_server_killed_mid_flight_fails_the_waiting_commands_then_serves_after_restart() -> None:
    server = RedisServer(extra_args=["--enable-debug-command", "local"]).start()
    try:
        client = connect(server.url, multiplex=True)
        try:
            assert await client.incr("n") == 1
            waiting = [asyncio.create_task(client.execute_command("DEBUG", "SLEEP", "2")) for _ in range(3)]
            await asyncio.sleep(0.2)
            assert server.proc is not None
            server.proc.kill()
            server.proc.wait(timeout=10)
            results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 20)
            assert all(isinstance(r, rexc.ConnectionError) for r in results), results
            with pytest.raises(rexc.ConnectionError):
                await client.incr("n")
            server.proc = None
            server.start()  # same port, empty data
            assert await client.incr("n") == 1  # a new connection
        finally:
            await client.aclose()
    finally:
        server.stop()


async def test_a_line_idle_past_the_health_check_interval_is_checked_before_the_next_command(
    debug_server: RedisServer,
) -> None:
    """The server closed the idle shared connection: the next command still succeeds, on a new one."""
    client = connect(debug_server.url, multiplex=True, health_check_interval=1)
    killer = connect(debug_server.url)
    try:
        assert await client.incr("hc") == 1
        assert await killer.client_kill_filter(_type="normal", skipme=True) >= 1
        await asyncio.sleep(1.5)
        assert await client.incr("hc") == 2  # PING failed on the dead line; the INCR went on a new one
    finally:
        await killer.aclose()
        await client.aclose()


async def test_an_error_reply_that_means_the_connection_is_raised_and_the_line_replaced() -> None:
    """A server still loading its data answers -LOADING (redis-py: BusyLoadingError, a ConnectionError):
    the command raises it, as on redis-py's pool, and the next command opens a new connection. A
    loopback server stands in for a Redis loading a large data set (hard to hold in that state)."""
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        loading = connections == 1
        try:
            while line := await reader.readline():
                if not line.startswith(b"*"):
                    continue
                args = []
                for _ in range(int(line[1:])):
                    await reader.readline()  # $<len>
                    args.append((await reader.readline()).strip())
                if args[0].upper() == b"CLIENT":
                    writer.write(b"+OK\r\n")
                elif loading:
                    writer.write(b"-LOADING Redis is loading the dataset in memory\r\n")
                else:
                    writer.write(b":42\r\n")
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = connect(f"redis://127.0.0.1:{port}/0", multiplex=True)
    try:
        with pytest.raises(rexc.BusyLoadingError):
            await client.incr("n")
        assert await client.incr("n") == 42
        assert connections == 2
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def _mute_server() -> AsyncIterator[str]:
    """A loopback server that takes connections and reads, and never answers: a stopped or black-holed Redis."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):
                pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"
    finally:
        server.close()


@pytest.mark.parametrize("multiplex", [True, False], ids=["shared-line", "pool"])
async def test_commands_waiting_on_a_redis_that_never_answers_fail_after_one_timeout_not_one_each(
    multiplex: bool,
) -> None:
    """Twenty commands at once, none with a connection open yet (a worker's slots after a reconnect): they
    fail together once the timeout has passed. The shared line opens once for all of them; the pool connects
    each outside its lock. Before, they took turns (the mux's open behind a lock, redis-py 5.3's pool
    connecting under its lock), each waiting its own timeout: the last failed after twenty."""
    timeout = 0.5
    async with _mute_server() as url:
        client = connect(url, multiplex=multiplex, socket_timeout=timeout)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()

            async def command(i: int) -> float:
                with pytest.raises(rexc.TimeoutError):
                    if multiplex:
                        await client.incr(f"n{i}")
                    else:
                        async with client.pipeline(transaction=False) as pipe:
                            await pipe.incr(f"n{i}").execute()
                return loop.time() - started

            failed_after = await asyncio.wait_for(asyncio.gather(*(command(i) for i in range(20))), 60)
        finally:
            await client.aclose()
    # Each waited for the hello and the reply at most: two timeouts, plus what a loaded machine adds.
    assert max(failed_after) < 3 * timeout + 1.0, failed_after
