"""A forward proxy on loopback through which Chromium makes every connection, checked at connect time.

Chromium is told to use it for everything (``--proxy-server`` for the browser, a per-context proxy for
each page, loopback *not* bypassed), so every request a page makes (documents, subresources, XHR and
fetch, WebSockets, redirects, anything a script starts) arrives here as ``CONNECT host:port`` (https,
wss, ws) or as an absolute-form request (``GET http://host/...``). The proxy resolves the host itself,
checks every address with the same policy as plain fetching (:func:`address_block_reason`) and connects
to exactly the address it checked, so there is no DNS-rebinding window and no way around the check: a
browser behind a proxy never resolves names itself.

With an ``upstream`` (the job's proxy group, trawl.worker.proxies) the connection to the checked address
goes through that proxy, as a CONNECT (HTTP proxy) or SOCKS5 connect to the address, never to the name.

One proxy serves one browser context (trawl.worker.browser.contexts): the pages one job renders as one
identity, possibly several at once. Its byte budget grows by each page's share as the page starts
(:meth:`PolicyProxy.grant`), its counters are read by each page as a window (from its start to its end),
its refusals name the ``host:port`` refused so that a page counts only those of the destinations it asked
for, and closing it (the context's end) cuts every connection still open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from python_socks import ProxyConnectionError, ProxyError, ProxyTimeoutError
from python_socks.async_.asyncio import Proxy as UpstreamConnector

from trawl.egress import names
from trawl.egress.addresses import IPNetwork, address_block_reason

from ..proxies import ProxyEndpoint

log = logging.getLogger("trawl.worker.browser")

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT = 10.0
CHUNK = 64 * 1024
MAX_BLOCKED_KEPT = 50
MAX_REFUSALS_KEPT = 256  # the latest refusals (host:port, reason), for the pages of a shared context
# Request headers meant for the proxy or for this one hop; the upstream connection is always closed
# after one response so that one client connection never carries requests to two checked hosts.
_HOP_HEADERS = frozenset({b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"})


class ProxyRefused(Exception):
    """A destination the policy refuses, or one that cannot be reached."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class ProxyStats:
    connections: int = 0  # upstream connections made
    blocked: list[str] = field(default_factory=list)  # "host:port: reason", the first MAX_BLOCKED_KEPT
    blocked_count: int = 0
    bytes_down: int = 0  # bytes received from upstream servers
    over_budget: bool = False
    # (sequence number, "host:port", reason) of the latest refusals; the sequence number is blocked_count
    refusals: deque[tuple[int, str, str]] = field(default_factory=lambda: deque(maxlen=MAX_REFUSALS_KEPT))

    def refused_since(self, seq: int, authorities: set[str]) -> list[str]:
        """Refusals after the ``seq``-th of destinations in ``authorities``, as "host:port: reason"."""
        return [f"{a}: {r}" for n, a, r in self.refusals if n > seq and a in authorities]


def split_host_port(authority: str, default_port: int) -> tuple[str, int]:
    """``host:port`` / ``[v6]:port`` / ``host`` -> (host, port); raises ValueError on junk."""
    if authority.startswith("["):
        end = authority.index("]")
        host = authority[1:end]
        rest = authority[end + 1 :]
        port = int(rest[1:]) if rest.startswith(":") else default_port
    elif authority.count(":") == 1:
        host, _, p = authority.partition(":")
        port = int(p)
    else:
        host, port = authority, default_port
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad authority {authority!r}")
    return host, port


class PolicyProxy:
    """An HTTP/1.1 forward proxy (CONNECT and absolute-form) enforcing the address policy."""

    def __init__(
        self,
        allowed: Sequence[IPNetwork] = (),
        *,
        connect_timeout: float = 10.0,
        max_bytes: int | None = None,
        upstream: ProxyEndpoint | None = None,
    ) -> None:
        self.allowed = tuple(allowed)
        self.upstream = upstream
        self.connect_timeout = connect_timeout
        self.max_bytes = max_bytes
        self.stats = ProxyStats()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def grant(self, nbytes: int) -> None:
        """One more page's share of traffic: the context's budget is the sum over the pages it served."""
        self.max_bytes = (self.max_bytes or 0) + nbytes

    async def start(self) -> PolicyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=MAX_HEAD_BYTES)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        """Stop listening and cut every open connection (the page's time is up)."""
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0):
                    await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> PolicyProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- one client connection ---------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                async with asyncio.timeout(HEAD_TIMEOUT):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            try:
                if self.stats.over_budget:  # the page's budget is spent: nothing more for it
                    raise ProxyRefused(403, f"page traffic exceeded {self.max_bytes} bytes")
                up_reader, upstream, first = await self._open(head)
            except ProxyRefused as refused:
                await self._refuse(writer, refused)
                return
            self._writers.add(upstream)
            if first is None:  # CONNECT: the tunnel is open
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                upstream.write(first)
            await self._pipe(reader, writer, up_reader, upstream)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a broken client or server connection ends only that connection
            log.debug("proxy connection failed", extra={"error": repr(exc)})
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._writers.discard(w)
                    w.transport.abort()
            self._tasks.discard(task)

    async def _open(self, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes | None]:
        """Parse the request head, check and connect; returns the bytes to send upstream first (None: CONNECT)."""
        lines = head.split(b"\r\n")
        try:
            method, target, version = lines[0].decode("latin-1").split(" ")
        except ValueError as exc:
            raise ProxyRefused(400, "malformed request line") from exc
        if method == "CONNECT":
            try:
                host, port = split_host_port(target, 443)
            except ValueError as exc:
                raise ProxyRefused(400, str(exc)) from exc
            reader, writer = await self._connect(host, port)
            return reader, writer, None
        try:
            parts = urlsplit(target)
            if parts.scheme not in ("http", "ws") or not parts.netloc:
                raise ValueError(f"only absolute http URLs are proxied, not {target[:100]!r}")
            host, port = split_host_port(parts.netloc.rpartition("@")[2], 80)
        except ValueError as exc:
            raise ProxyRefused(400, str(exc)) from exc
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        out = [f"{method} {path} {version}".encode("latin-1")]
        upgrade = False
        for line in lines[1:]:
            if not line:
                continue
            name = line.split(b":", 1)[0].strip().lower()
            if name == b"upgrade":
                upgrade = True
            if name not in _HOP_HEADERS:
                out.append(line)
        out.append(b"Connection: upgrade" if upgrade else b"Connection: close")
        reader, writer = await self._connect(host, port)
        return reader, writer, b"\r\n".join(out) + b"\r\n\r\n"

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            # on the bounded pool for job-chosen names (trawl.egress.names), not the loop's default executor
            infos = await names.getaddrinfo(host.split("%", 1)[0], port, seconds=self.connect_timeout)
        except OSError as exc:
            raise ProxyRefused(502, f"cannot resolve {host}: {exc}") from exc
        refused: list[str] = []
        last: Exception | None = None
        for _fam, _type, _proto, _canon, sockaddr in infos:
            address = str(sockaddr[0])
            reason = address_block_reason(address, self.allowed)
            if reason is not None:
                refused.append(reason)
                continue
            try:
                async with asyncio.timeout(self.connect_timeout):
                    # connect to the very address that was checked, never to the name
                    reader, writer = await self._open_connection(address, port)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            self.stats.connections += 1
            return reader, writer
        if refused and last is None:
            self.stats.blocked_count += 1
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self.stats.refusals.append((self.stats.blocked_count, authority.lower(), "; ".join(refused)))
            if len(self.stats.blocked) < MAX_BLOCKED_KEPT:
                self.stats.blocked.append(f"{host}:{port}: {'; '.join(refused)}")
            raise ProxyRefused(403, f"refused {host}:{port}: {'; '.join(refused)}")
        raise ProxyRefused(502, f"cannot connect to {host}:{port}: {last!r}")

    async def _open_connection(self, address: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to a checked address: direct, or tunnelled through the upstream proxy to the address."""
        if self.upstream is None:
            return await asyncio.open_connection(address, port, limit=CHUNK)
        if self.upstream.scheme == "https":
            raise ProxyRefused(
                502, f"proxy {self.upstream.label}: a TLS (https://) proxy is not chained in browser mode"
            )
        try:
            sock = await UpstreamConnector.from_url(self.upstream.url).connect(address, port, self.connect_timeout)
        except (ProxyError, ProxyConnectionError, ProxyTimeoutError) as exc:
            # python_socks' text names host:port, never the credentials; the upstream's label only here
            raise ProxyRefused(502, f"proxy {self.upstream.label} failed: {type(exc).__name__}") from exc
        return await asyncio.open_connection(sock=sock, limit=CHUNK)

    async def _refuse(self, writer: asyncio.StreamWriter, refused: ProxyRefused) -> None:
        text = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}.get(refused.status, "Error")
        reason = refused.reason.replace("\r", " ").replace("\n", " ")[:300]
        writer.write(
            f"HTTP/1.1 {refused.status} {text}\r\nX-Trawl-Refused: {reason}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode("latin-1", "replace")
        )
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await writer.drain()

    async def _pipe(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
    ) -> None:
        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, down: bool) -> None:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    with contextlib.suppress(Exception):
                        if dst.can_write_eof():
                            dst.write_eof()
                    return
                if down:
                    self.stats.bytes_down += len(data)
                    if self.max_bytes is not None and self.stats.bytes_down > self.max_bytes:
                        self.stats.over_budget = True
                        raise ProxyRefused(507, f"page traffic exceeds {self.max_bytes} bytes")
                dst.write(data)
                await dst.drain()

        up = asyncio.create_task(copy(client_r, up_w, False))
        down = asyncio.create_task(copy(up_r, client_w, True))

        def client_gone(t: asyncio.Task[None]) -> None:
            # the client reset the connection (page closed, request cancelled): stop waiting for the server
            if not t.cancelled() and t.exception() is not None:
                down.cancel()

        up.add_done_callback(client_gone)
        try:
            # the server's side decides when the exchange is over; the client may half-close early
            await down
        except ProxyRefused:
            self.over_budget_cut()
        except asyncio.CancelledError:
            if not up.done():
                raise
        finally:
            up.cancel()
            with contextlib.suppress(BaseException):
                await up

    def over_budget_cut(self) -> None:
        """The page's byte budget is spent: cut every connection of the page."""
        for w in list(self._writers):
            w.transport.abort()
