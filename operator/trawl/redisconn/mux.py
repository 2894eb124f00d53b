"""One Redis connection shared by every coroutine of a process: commands written together, replies in order.

redis-py's asyncio client checks a connection out of its pool for each command, sends it, waits for
its reply and checks the connection back in: a worker with 32 task slots keeps up to 32 connections,
and every command costs its own system calls, pool bookkeeping and connection health check. Redis
answers the commands of one connection in the order it received them, so one connection can carry
them all (ioredis, BullMQ's client, works this way): the commands issued during one turn of the event
loop go out in one write, and one reader hands each reply to the command that is next in line; hiredis
parses whatever arrived in one call, in C. At concurrency 8 this took a round trip's client CPU from
about 30 to 7-10 µs (``bench/queue_throughput.py`` and ``docs/benchmarks.md`` have the measured effect
on the queue).

:class:`MultiplexedRedis` is a ``redis.asyncio.Redis`` whose ``execute_command`` does that; everything
else stays redis-py's. The shared connection comes from the client's own pool, so the password, TLS,
database and time-outs are the same as for any other command. Pipelines and transactions (their own
connection per call, as before), blocking commands (they would hold every other command back),
connection-state commands and ``NEVER_DECODE`` reads take redis-py's usual path.

Failure semantics are redis-py's: an error reply is raised to its own caller only; a lost connection
fails every command waiting on it with ``ConnectionError`` (each may or may not have run, exactly as a
command whose connection drops after sending), and the next command opens a new one. With
``socket_timeout`` set, a reply that does not come within it fails the waiting commands with
``TimeoutError`` and drops the connection (the replies that were due could no longer be matched).
A caller cancelled while it waits does not disturb the others: its reply is read and discarded.
Commands that find no line open wait for one opening together and share its outcome: against a Redis
that does not answer they all fail after one ``socket_timeout``, not one each in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections import deque
from typing import Any

import hiredis
import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis._parsers.encoders import Encoder
from redis.asyncio.connection import AbstractConnection
from redis.client import EMPTY_RESPONSE, NEVER_DECODE

# Commands that must not share the connection: they block it (every command behind them would wait), or
# change its state for whoever comes next.
OWN_CONNECTION = frozenset(
    {
        "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
        "XREAD", "XREADGROUP", "WAIT", "WAITAOF", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR",
        "SELECT", "AUTH", "HELLO", "RESET", "QUIT", "CLIENT", "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH",
    }
)  # fmt: skip


# Packed bulk strings of recent str and int arguments: a worker sends the same keys, script SHA and small
# numbers in every command, and packing them again was most of the packer's time. Bounded: cleared when full.
_BULK: dict[str | int, bytes] = {}
_BULK_MAX = 4096
_BULK_MAX_LEN = 256
READ_SIZE = 65536


def pack(args: tuple[Any, ...], encoder: Encoder) -> bytes | None:
    """``args`` as one RESP command, for the types Trawl sends (bytes, str, int, float); None for anything
    else (and for a command name with a space, ``SCRIPT LOAD``), which redis-py's packer handles. Same
    bytes as redis-py's (a third of a round trip's client CPU went to it); a test compares the two."""
    name = args[0]
    if type(name) is str and " " in name:
        return None
    out = [b"*%d\r\n" % len(args)]
    cache = _BULK
    for arg in args:
        kind = type(arg)
        if kind is str or kind is int:
            bulk = cache.get(arg)
            if bulk is None:
                data = arg.encode(encoder.encoding, encoder.encoding_errors) if kind is str else repr(arg).encode()
                bulk = b"$%d\r\n%b\r\n" % (len(data), data)
                if len(data) <= _BULK_MAX_LEN and (kind is int or arg.isascii()):  # the same bytes in any encoding
                    if len(cache) >= _BULK_MAX:
                        cache.clear()
                    cache[arg] = bulk
            out.append(bulk)
        elif kind is bytes:
            out.append(b"$%d\r\n%b\r\n" % (len(arg), arg))
        elif kind is float:
            data = repr(arg).encode()
            out.append(b"$%d\r\n%b\r\n" % (len(data), data))
        else:
            return None
    return b"".join(out)


class _Line:
    """The shared connection: commands in flight, in the order they were written."""

    def __init__(self, conn: AbstractConnection) -> None:
        self.conn = conn
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.outgoing: list[bytes] = []
        self.flush_scheduled = False
        self.reader: asyncio.Task[None] | None = None
        self.broken: BaseException | None = None
        self.last_reply = asyncio.get_running_loop().time()
        encoder = conn.encoder
        parser: Any = conn._parser
        self.replies = hiredis.Reader(
            protocolError=rexc.InvalidResponse,
            replyError=parser.parse_error,
            encoding=encoder.encoding if encoder.decode_responses else None,
            errors=encoder.encoding_errors if encoder.decode_responses else None,
        )

    def idle_longer_than(self, seconds: float) -> bool:
        """No command in flight and no reply for ``seconds`` (0: never)."""
        return bool(seconds) and not self.waiting and asyncio.get_running_loop().time() - self.last_reply > seconds

    def send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        # Appended together, with no await in between: the n-th command written is the n-th reply read.
        packed = pack(args, self.conn.encoder)
        if packed is None:
            self.outgoing.extend(self.conn.pack_command(*args))
        else:
            self.outgoing.append(packed)
        self.waiting.append(fut)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            loop.call_soon(self._flush)
        if self.reader is None:
            self.reader = loop.create_task(self._read())
        return fut

    def _flush(self) -> None:
        self.flush_scheduled = False
        if self.broken is not None or not self.outgoing:
            return
        writer = self.conn._writer
        if writer is None:
            self.fail(rexc.ConnectionError("Redis connection closed"))
            return
        try:
            writer.writelines(self.outgoing)
        except Exception as exc:  # the transport is closing: every waiting command fails
            self.fail(rexc.ConnectionError(f"Error writing to Redis: {exc}"))
        self.outgoing = []

    async def _read(self) -> None:
        """Read replies while commands wait for them; then end (the next command starts a new reader).

        hiredis parses whatever arrived in one call, in C (redis-py reads a reply line by line, an await
        each); error replies become redis-py's own exception classes (its parser's ``parse_error``). A
        reply past ``socket_timeout`` fails the line (replies could no longer be matched)."""
        stream: Any = self.conn._reader
        replies = self.replies
        timeout = self.conn.socket_timeout
        try:
            while self.waiting and self.broken is None:
                reply = replies.gets()
                if reply is False:
                    if timeout is None:
                        data = await stream.read(READ_SIZE)
                    else:
                        async with asyncio.timeout(timeout):
                            data = await stream.read(READ_SIZE)
                    if not data:
                        raise rexc.ConnectionError("Connection closed by server.")
                    replies.feed(data)
                    continue
                fut = self.waiting.popleft()
                if fut.done():  # its caller was cancelled: the reply is read and dropped
                    continue
                if isinstance(reply, rexc.RedisError):  # an error reply, as redis-py's parse_error made it
                    fut.set_exception(reply)
                else:
                    fut.set_result(reply)
        except asyncio.CancelledError:
            self.fail(rexc.ConnectionError("Redis connection closed"))
            raise
        except TimeoutError:
            self.fail(rexc.TimeoutError(f"No reply from Redis within {timeout}s"))
        except Exception as exc:  # EOF, reset, a protocol error: the line is done
            self.fail(exc if isinstance(exc, rexc.ConnectionError) else rexc.ConnectionError(f"Redis: {exc!r}"))
        finally:
            self.reader = None
            self.last_reply = asyncio.get_running_loop().time()

    def fail(self, exc: BaseException) -> None:
        if self.broken is None:
            self.broken = exc
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)


class MultiplexedRedis(aioredis.Redis):
    """A ``redis.asyncio.Redis`` whose plain commands share one connection (see the module's doc)."""

    _line: _Line | None = None
    _opening: asyncio.Future[_Line] | None = None

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = args[0]
        key = name.upper() if isinstance(name, str) else name.decode().upper()
        if key in OWN_CONNECTION or NEVER_DECODE in options or self.single_connection_client:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        line = self._line
        if line is None or line.broken is not None or line.idle_longer_than(self._health_check_interval):
            line = await self._open_line()
        try:
            response = await line.send(args)
        except rexc.ResponseError:
            if EMPTY_RESPONSE in options:
                return options[EMPTY_RESPONSE]
            raise
        except (rexc.ConnectionError, rexc.TimeoutError):
            await self._drop_line(line)
            raise
        options.pop(EMPTY_RESPONSE, None)
        options.pop("keys", None)
        callback = self.response_callbacks.get(name)
        if callback is None:
            return response
        value = callback(response, **options)
        return await value if inspect.isawaitable(value) else value

    @property
    def _health_check_interval(self) -> float:
        return float(self.connection_pool.connection_kwargs.get("health_check_interval") or 0)

    async def _open_line(self) -> _Line:
        """The shared line, opened or re-opened (:meth:`_open`), once for every command that waits for it.

        Callers that come while it opens share that one attempt, its line or its failure (each caller then
        retries as it would any connection error). Before, they took turns behind a lock, each making its
        own attempt: against a Redis that does not answer, the n-th waited n timeouts. Shielded, so a
        cancelled caller does not cancel the others' attempt."""
        opening = self._opening
        if opening is None:
            opening = self._opening = asyncio.ensure_future(self._open())
            opening.add_done_callback(self._opened)
        return await asyncio.shield(opening)

    def _opened(self, opening: asyncio.Future[_Line]) -> None:
        if self._opening is opening:
            self._opening = None
        if not opening.cancelled():
            opening.exception()  # retrieved here: every caller may have been cancelled meanwhile

    async def _open(self) -> _Line:
        """The line, checked or new: one idle past ``health_check_interval`` is checked with a PING first,
        as redis-py checks a pooled connection (a peer gone quiet is found before a command that matters is
        written to it)."""
        line = self._line
        if line is not None and line.broken is None:
            if not line.idle_longer_than(self._health_check_interval):
                return line
            with contextlib.suppress(rexc.ConnectionError, rexc.TimeoutError):
                await line.send(("PING",))
                return line
        if line is not None:
            await self._drop_line(line)
        await self.initialize()
        conn = await self.connection_pool.get_connection()
        self._line = _Line(conn)
        return self._line

    async def _drop_line(self, line: _Line) -> None:
        if self._line is line:
            self._line = None
        if line.conn is None:
            return
        conn, line.conn = line.conn, None  # type: ignore[assignment]  # released once
        line.fail(rexc.ConnectionError("Redis connection closed"))
        await conn.disconnect(nowait=True)
        with contextlib.suppress(Exception):
            await self.connection_pool.release(conn)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        opening = self._opening
        if opening is not None:
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await opening
        line = self._line
        if line is not None:
            reader = line.reader
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
            await self._drop_line(line)
        await super().aclose(close_connection_pool)
