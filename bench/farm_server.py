"""The many-hosts farm's HTTP server (``bench/many_hosts.py --role farm``): a minimal HTTP/1.1 keep-alive
responder on asyncio whose every read is a ``recvmsg`` carrying the kernel's receive timestamp, so that a
request is known by the time it reached the machine, not by when the farm's event loop got round to it.

Why the kernel's time: the farm shares two cores with the crawler and Redis, and its loop stalls; an
arrival stamped by the handler with the loop's clock is late by the stall (0.14-0.41 s seen), and the next
request of the host, spaced correctly by the sender, then looks too close. The kernel stamps a packet when
it is received, whatever the farm's loop is doing.

How: ``SO_TIMESTAMPNS`` set on the listening socket (Linux copies it to every accepted one; it is set there
again anyway) makes the stack stamp each received skb with CLOCK_REALTIME (on loopback, in ``loopback_xmit``
-> ``netif_rx``: within the sender's own ``send`` call) and a TCP ``recvmsg`` return that stamp as an
``SCM_TIMESTAMPNS`` control message: the stamp of the *last* skb whose data the call copied. One read is
therefore exact for a request that came in one read's worth of segments with nothing after it, which is how
a keep-alive client that waits for each answer before its next request sends (no pipelining: aiohttp,
Scrapy/Twisted). A request is given the stamp of the read that brought its first bytes; a pipelined request
that came in the same read as the previous one gets that read's stamp (at most as late as its own).

``SO_TIMESTAMPING`` with ``SOF_TIMESTAMPING_RX_SOFTWARE`` reads the same software stamp (``skb->tstamp``)
through a three-timespec message; ``SO_TIMESTAMPNS`` is the simpler of the two. aiohttp's server cannot be
used: its transport reads with ``recv``, which drops the control message, and a transport of our own under
it would rest on asyncio's private classes. This server is small enough to read whole: GET and HEAD, the
request line and headers (a ``Host`` header required in HTTP/1.1), a ``Content-Length`` body skipped, no
chunked bodies; keep-alive by HTTP/1.1's default, ``Connection: close`` honoured, HTTP/1.0 kept alive only
when it asks.

Clocks: the kernel's stamps are CLOCK_REALTIME, the bench's clock is ``time.monotonic()``; a stamp is moved
onto the monotonic clock with the two clocks' offset read at the same instant (they differ only by steps of
the wall clock, none of which happen within a run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from host_farm import Arrival, index_of, limit_of

# SO_TIMESTAMPNS_OLD of asm-generic/socket.h (x86-64, arm64): a struct timespec of two 64-bit longs. Python
# 3.11's socket module does not name it.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
TIMESPEC = struct.Struct("@qq")
ANCBUF = socket.CMSG_SPACE(TIMESPEC.size)
READ_SIZE = 65536
MAX_HEAD = 16384  # bytes of request line and headers before a 431

Ancillary = Sequence[tuple[int, int, bytes]]


def kernel_time_ns(ancdata: Ancillary) -> int | None:
    """The kernel's receive timestamp (CLOCK_REALTIME, ns) in a ``recvmsg``'s control messages, if any."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return int(sec) * 1_000_000_000 + int(nsec)
    return None


def realtime_to_monotonic(realtime_ns: int, offset_ns: int) -> float:
    """A CLOCK_REALTIME instant on the monotonic clock, ``offset_ns`` = realtime - monotonic read together."""
    return (realtime_ns - offset_ns) / 1e9


def clock_offset_ns() -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC now (ns)."""
    return time.time_ns() - time.monotonic_ns()


class BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: dict[str, str]  # names lowercased; a repeated header's last value

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


def parse_request(buf: bytes) -> tuple[Request | None, int]:
    """The first request in ``buf`` and the bytes it takes (its body included), or (None, 0) while it is
    incomplete. Raises BadRequest for what this server does not take."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise BadRequest(431, "request header too large")
        return None, 0
    lines = buf[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1]:
        raise BadRequest(400, f"bad request line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, f"bad header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    if parts[2] == "HTTP/1.1" and "host" not in headers:
        raise BadRequest(400, "no Host header")
    if "transfer-encoding" in headers:
        raise BadRequest(501, "chunked bodies are not taken")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise BadRequest(400, "bad Content-Length") from None
    if length < 0:
        raise BadRequest(400, "bad Content-Length")
    total = end + 4 + length
    if len(buf) < total:
        return None, 0
    return Request(parts[0], parts[1], parts[2], headers), total


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           431: "Request Header Fields Too Large", 501: "Not Implemented"}  # fmt: skip


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


def render(reply: Reply, request: Request | None, keep_alive: bool) -> bytes:
    """A reply's bytes: status line, Content-Type, Content-Length, Connection; no body for HEAD."""
    head = [
        f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Unknown')}",
        f"Content-Type: {reply.content_type}",
        f"Content-Length: {len(reply.body)}",
    ]
    if not keep_alive:
        head.append("Connection: close")
    elif request is not None and request.version == "HTTP/1.0":
        head.append("Connection: keep-alive")
    body = b"" if request is not None and request.method == "HEAD" else reply.body
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


@dataclass(frozen=True)
class Arrived:
    """A request as the handler gets it."""

    request: Request
    local: str  # the address the client connected to (the farm's host)
    peer: tuple[str, int]
    kernel: float | None  # monotonic seconds its first bytes reached the machine (None: no stamp came)


Handler = Callable[[Arrived], Awaitable[Reply]]


async def _readable(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    fut: asyncio.Future[None] = loop.create_future()
    fd = conn.fileno()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await fut
    finally:
        loop.remove_reader(fd)


async def recv_stamped(conn: socket.socket) -> tuple[bytes, float | None]:
    """Data from a non-blocking socket (b"" at its end) and the kernel's stamp of it on the monotonic clock."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, anc, _flags, _addr = conn.recvmsg(READ_SIZE, ANCBUF)
        except (BlockingIOError, InterruptedError):
            await _readable(loop, conn)
            continue
        except ConnectionError:
            return b"", None
        stamp = kernel_time_ns(anc)
        return data, None if stamp is None else realtime_to_monotonic(stamp, clock_offset_ns())


@dataclass
class StampedServer:
    """Serves ``handler`` on a TCP port, each request with its kernel arrival time."""

    handler: Handler
    backlog: int = 4096
    port: int = 0
    _sock: socket.socket | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # on before the first packet comes
        sock.bind((host, port))
        sock.listen(self.backlog)
        sock.setblocking(False)
        self._sock, self.port = sock, sock.getsockname()[1]
        self._spawn(self._accept(sock))
        return self.port

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, peer = await loop.sock_accept(sock)
            conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._spawn(self._serve(conn, peer))

    async def _serve(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        with conn, contextlib.suppress(ConnectionError):
            local = conn.getsockname()[0]
            buf, stamp = b"", None
            while True:
                try:
                    request, used = parse_request(buf)
                except BadRequest as e:
                    await loop.sock_sendall(conn, render(Reply(e.status, str(e).encode()), None, False))
                    return
                if request is None:
                    data, kernel = await recv_stamped(conn)
                    if not data:
                        return
                    if not buf:  # the read that brought a request's first bytes
                        stamp = kernel
                    buf += data
                    continue
                buf = buf[used:]
                if request.method in ("GET", "HEAD"):
                    reply = await self.handler(Arrived(request, local, peer, stamp))
                else:
                    reply = Reply(405)
                await loop.sock_sendall(conn, render(reply, request, request.keep_alive))
                if not request.keep_alive:
                    return


# --- the farm -------------------------------------------------------------------------------------------

BODY = "<html><head><title>p</title></head><body><h1>page {n} of host {h}</h1><p>{pad}</p></body></html>"
PAD = "lorem ipsum " * 60
NOT_FOUND = Reply(404, b"not found")


@dataclass
class Farm:
    """The many-hosts farm's pages and request log (bench/many_hosts.py): ``/p/N`` on a farm host waits
    that host's latency and is logged (host_farm.Arrival: the kernel's arrival time, the host's requests in
    flight, the handler's time); ``/bare/N`` (a cap run's) answers at once and logs its arrival time only;
    ``/__/first`` and ``/__/log`` are the controller's (the first arrival; the log since the last call,
    cleared). Anything else, a peer off loopback or an address outside the farm: 404."""

    log: dict[int, list[Arrival]] = field(default_factory=dict)
    in_flight: Counter[int] = field(default_factory=Counter)
    bare: list[float] = field(default_factory=list)
    unstamped: int = 0  # requests the kernel gave no timestamp for (logged at their handler's time)
    # The TCP connections each host's requests came on (the client's address and port): a crawler that
    # keeps its connections alive opens about one per request a host has in flight at once, not one per page.
    conns: dict[int, set[tuple[str, int]]] = field(default_factory=dict)

    @staticmethod
    def page(n: str, host: int) -> Reply:
        return Reply(200, BODY.format(n=n, h=host, pad=PAD).encode(), "text/html; charset=utf-8")

    async def handle(self, req: Arrived) -> Reply:
        handled = time.monotonic()
        path = req.request.path
        if path.startswith("/__/"):
            return self.control(path[len("/__/") :])
        kind, _, n = path[1:].partition("/")
        host = index_of(req.local)
        if kind not in ("p", "bare") or not n or "/" in n or host is None or not req.peer[0].startswith("127."):
            return NOT_FOUND  # /robots.txt included
        if req.kernel is None:
            self.unstamped += 1
        at = req.kernel if req.kernel is not None else handled
        if kind == "bare":  # a cap's run: no latency, no limit, arrivals only
            self.bare.append(at)
            return self.page(n, host)
        self.in_flight[host] += 1
        self.log.setdefault(host, []).append(Arrival(at, self.in_flight[host], handled))
        self.conns.setdefault(host, set()).add(req.peer)
        try:
            await asyncio.sleep(limit_of(host).latency)
        finally:
            self.in_flight[host] -= 1  # before the answer is written: a client's next request comes after it
        return self.page(n, host)

    def control(self, action: str) -> Reply:
        if action == "first":
            firsts = [min(e.at for e in entries) for entries in self.log.values() if entries]
            out: dict[str, Any] = {"first": min(firsts + self.bare[:1], default=None)}
        elif action == "log":
            out = {
                "hosts": {str(h): e for h, e in self.log.items()},
                "bare": list(self.bare),
                "connections": sum(len(c) for c in self.conns.values()),
                "unstamped": self.unstamped,
            }
            self.log, self.bare, self.conns, self.unstamped = {}, [], {}, 0
        else:
            return NOT_FOUND
        return Reply(200, json.dumps(out).encode(), "application/json")
