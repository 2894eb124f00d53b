"""Safe fetching: aiohttp with an address-checking resolver, manual redirects and hard caps.

Every hop of a fetch is checked before a byte is sent: IP-literal hosts directly, names through
:class:`SafeResolver`, which resolves, refuses blocked addresses and hands aiohttp only the addresses
it checked, so the connection goes to the address that was checked (no DNS rebinding window). The
connected peer is verified again once the response headers arrive. Bodies are read incrementally and
capped both on the wire and after gzip/deflate/brotli decompression; the whole fetch, redirects
included, runs under one deadline.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol
from urllib.parse import urljoin, urlsplit

import aiohttp
import brotli
from aiohttp.connector import Connection

from trawl.api.plain import DEFAULT_USER_AGENT, FailureClass
from trawl.boot import castore
from trawl.egress.addresses import IPNetwork, address_block_reason
from trawl.egress.resolver import SafeResolver, find_blocked

from .cookies import SessionJar
from .proxied import ProxySessions, hop_errors, proxy_failure, refused_credentials, through_proxy
from .proxies import ProxyEndpoint

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
        "Accept-Encoding",
    )
)
MAX_RETRY_AFTER = 24 * 3600.0
HTML_TYPES = ("text/html", "application/xhtml+xml", "text/plain", "text/xml", "application/xml")


class Leaving(Protocol):
    """What ``before_send`` may return: told once the request's headers are written (or its send failed)."""

    def written(self) -> None: ...


BeforeSend = Callable[[], Awaitable[Leaving | None]]


def spaced_request(before_send: BeforeSend) -> type[aiohttp.ClientRequest]:
    """aiohttp's request class with ``before_send`` awaited as the request is sent, right before its headers are
    serialised and written: aiohttp's ``send`` awaits nothing before that write (its ``write_headers`` awaits
    only a trace's ``on_request_headers_sent``, and the sessions have no trace), so what waits here delays the
    request itself, not only its bookkeeping; what it returns is told once ``send`` is back (the headers are
    out by then). A request class, not a trace: a session with a trace builds a trace and its parameters for
    every event of every request (start, connection reuse, headers, end), 5 % of the worker's CPU at 1,000
    hosts (bench/many_hosts.py, issue 37) for the one hook it needs."""

    class SpacedRequest(aiohttp.ClientRequest):
        async def send(self, conn: Connection) -> aiohttp.ClientResponse:
            leaving = await before_send()
            try:
                return await super().send(conn)
            finally:
                if leaving is not None:
                    leaving.written()

    return SpacedRequest


class FetchError(Exception):
    """A failed fetch, classified. ``retry_after`` is the server's Retry-After, in seconds, if any."""

    def __init__(
        self,
        failure_class: FailureClass,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        url: str | None = None,
        proxy_fault: bool = False,
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.url = url
        self.proxy_fault = proxy_fault  # the upstream proxy failed (refused, 407), not the page

    def __repr__(self) -> str:
        return f"FetchError({self.failure_class.value}, {self.message!r})"


class FetchLimits(NamedTuple):
    max_bytes: int = 10 * 1024 * 1024
    max_redirects: int = 10
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    total_timeout: float = 30.0


@dataclass(slots=True)
class FetchResult:
    url: str  # the requested URL
    final_url: str  # after redirects
    status: int
    headers: dict[str, str]
    body: bytes
    content_type: str
    charset: str | None
    elapsed: float
    wire_bytes: int
    redirects: list[str] = field(default_factory=list)

    def text(self) -> str:
        return self.body.decode(self.charset or "utf-8", errors="replace")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    delta = when.timestamp() - (time.time() if now is None else now)
    return min(max(delta, 0.0), MAX_RETRY_AFTER)


def classify_status(status: int, retry_after: float | None) -> FetchError | None:
    """The failure an HTTP status means, or None for success."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return FetchError(FailureClass.HTTP_429, "HTTP 429 Too Many Requests", status=status, retry_after=retry_after)
    if status == 408:
        return FetchError(FailureClass.TIMEOUT, "HTTP 408 Request Timeout", status=status)
    if status >= 500:
        return FetchError(FailureClass.HTTP_5XX, f"HTTP {status}", status=status, retry_after=retry_after)
    if status >= 400:
        return FetchError(FailureClass.HTTP_4XX, f"HTTP {status}", status=status)
    return FetchError(FailureClass.BAD_CONTENT, f"unexpected HTTP status {status}", status=status)


class _Decoder:
    """Incremental Content-Encoding decoder that never produces more than ``limit`` bytes in total."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = encoding
        self.limit = limit
        self.produced = 0
        self._zlib: Any = None
        self._brotli: Any = None
        if encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._zlib = None  # decided on the first chunk: zlib-wrapped or raw
        elif encoding == "br":
            self._brotli = brotli.Decompressor()
        else:
            raise FetchError(FailureClass.BAD_CONTENT, f"unsupported Content-Encoding {encoding!r}")

    def _too_large(self) -> FetchError:
        return FetchError(
            FailureClass.TOO_LARGE,
            f"body exceeds {self.limit} bytes after {self.encoding} decompression",
        )

    def feed(self, chunk: bytes) -> bytes:
        try:
            if self._brotli is not None:
                return self._feed_brotli(chunk)
            if self._zlib is None:  # deflate: sniff the zlib header
                raw = not (len(chunk) >= 2 and (chunk[0] & 0x0F) == 8 and ((chunk[0] << 8) | chunk[1]) % 31 == 0)
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
            return self._feed_zlib(chunk)
        except (zlib.error, brotli.error) as exc:
            raise FetchError(FailureClass.BAD_CONTENT, f"corrupt {self.encoding} body: {exc}") from exc

    def _feed_zlib(self, chunk: bytes) -> bytes:
        parts: list[bytes] = []
        data = chunk
        while True:
            room = self.limit - self.produced + 1
            out = self._zlib.decompress(data, room)
            self.produced += len(out)
            if self.produced > self.limit:
                raise self._too_large()
            parts.append(out)
            data = self._zlib.unconsumed_tail
            if not data:
                break
        return b"".join(parts)

    def _feed_brotli(self, chunk: bytes) -> bytes:
        parts: list[bytes] = []
        data = chunk
        while True:
            room = self.limit - self.produced + 1
            out = self._brotli.process(data, output_buffer_limit=room)
            self.produced += len(out)
            if self.produced > self.limit:
                raise self._too_large()
            parts.append(out)
            data = b""
            if self._brotli.can_accept_more_data():
                break
        return b"".join(parts)


def _origin_of(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with default ports filled in: two URLs of one origin compare equal."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").rstrip("."), port or {"http": 80, "https": 443}.get(scheme)


HopHook = Callable[[str], Awaitable[None]]


class Fetcher:
    """One per worker process: a pooled aiohttp session with the safety checks above."""

    def __init__(
        self,
        *,
        allowed: Sequence[IPNetwork] = (),
        max_connections: int = 256,
        user_agent: str = DEFAULT_USER_AGENT,
        before_send: BeforeSend | None = None,
    ) -> None:
        """``before_send``: awaited right before each request's headers are written, direct or proxied
        (the worker's politeness spaces a domain's requests there: politeness.rate.before_send)."""
        self.allowed = tuple(allowed)
        self.max_connections = max_connections
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._ip_cache: dict[str, str | None] = {}
        self._resolver = SafeResolver(self.allowed)  # a proxied hop's target is resolved and checked here
        self._request_class = spaced_request(before_send) if before_send else aiohttp.ClientRequest
        self._proxies = ProxySessions(self._request_class)

    async def start(self) -> None:
        if self._session is not None:
            return
        await castore.ready()  # aiohttp's default TLS context must hold the CA store before any handshake
        connector = aiohttp.TCPConnector(
            resolver=SafeResolver(self.allowed),
            limit=self.max_connections,
            limit_per_host=0,
            ttl_dns_cache=30,
            enable_cleanup_closed=True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            trust_env=False,  # never route through an environment proxy: it would bypass the address checks
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent",),
            request_class=self._request_class,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._proxies.close()

    async def __aenter__(self) -> Fetcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _block_reason(self, address: str) -> str | None:
        try:
            return self._ip_cache[address]
        except KeyError:
            reason = address_block_reason(address, self.allowed)
            if len(self._ip_cache) > 4096:
                self._ip_cache.clear()
            self._ip_cache[address] = reason
            return reason

    def check_url(self, url: str) -> str:
        """Validate scheme and IP-literal hosts of one hop; returns the host."""
        try:
            parts = urlsplit(url)
            host = parts.hostname
            _ = parts.port
        except ValueError as exc:
            raise FetchError(FailureClass.INVALID_URL, f"invalid URL {url!r}: {exc}", url=url) from exc
        if parts.scheme not in ("http", "https"):
            raise FetchError(
                FailureClass.INVALID_URL, f"only http and https are fetched, not {parts.scheme!r}", url=url
            )
        if not host:
            raise FetchError(FailureClass.INVALID_URL, f"URL {url!r} has no host", url=url)
        if ":" in host or host.replace(".", "").isdigit() or host.startswith("0x"):
            # aiohttp connects to hosts that look numeric without the resolver (and the OS would read
            # 127.1 or 2130706433 as 127.0.0.1): only a canonical IP literal is accepted, and checked here.
            if not _is_ip(host):
                raise FetchError(
                    FailureClass.BLOCKED_ADDRESS, f"refused {url}: {host!r} is not a canonical IP address", url=url
                )
            reason = self._block_reason(host)
            if reason is not None:
                raise FetchError(FailureClass.BLOCKED_ADDRESS, f"refused {url}: {reason}", url=url)
        return host

    async def fetch(
        self,
        url: str,
        *,
        limits: FetchLimits = FetchLimits(),
        headers: dict[str, str] | None = None,
        user_agent: str | None = None,
        before_hop: HopHook | None = None,
        conditional: Mapping[str, str] | None = None,
        content_types: tuple[str, ...] | None = HTML_TYPES,
        proxy: ProxyEndpoint | None = None,
        cookies: SessionJar | None = None,
    ) -> FetchResult:
        """GET ``url`` following redirects by hand; raises :class:`FetchError` on any failure.

        ``cookies``: a session's jar (trawl.worker.cookies): each hop carries the cookies it scopes to that
        hop's URL, and each response's ``Set-Cookie`` goes into it (redirects and error answers too).

        ``proxy``: the upstream proxy every hop goes through (trawl.worker.proxies); each hop's target is
        still resolved and checked here first, and the proxy is handed the checked address (proxied.py).

        ``conditional``: validators (If-None-Match, If-Modified-Since) of ``url`` itself, so sent with the first
        request only, never to where it redirects; a 304 to them is a result with status 304 and no body.
        A body whose content type starts with none of ``content_types`` is refused (BadContent); None takes
        any (a sitemap: its reader decides, by the bytes)."""
        if self._session is None:
            await self.start()
        started = time.monotonic()
        try:
            async with asyncio.timeout(limits.total_timeout):
                return await self._fetch(
                    url, limits, headers, user_agent, before_hop, started, conditional, content_types, proxy, cookies
                )
        except TimeoutError as exc:
            raise FetchError(
                FailureClass.TIMEOUT, f"fetch of {url} exceeded {limits.total_timeout:g}s", url=url
            ) from exc

    async def _fetch(
        self,
        url: str,
        limits: FetchLimits,
        headers: dict[str, str] | None,
        user_agent: str | None,
        before_hop: HopHook | None,
        started: float,
        conditional: Mapping[str, str] | None = None,
        content_types: tuple[str, ...] | None = HTML_TYPES,
        proxy: ProxyEndpoint | None = None,
        cookies: SessionJar | None = None,
    ) -> FetchResult:
        assert self._session is not None
        req_headers = {k: v for k, v in (headers or {}).items() if k.lower() not in HOP_BY_HOP}
        req_headers["User-Agent"] = user_agent or self.user_agent
        req_headers["Accept-Encoding"] = "gzip, deflate, br"
        req_headers.setdefault("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout, sock_read=limits.read_timeout)
        # The job's headers (Authorization, Cookie, ...) go to the first URL's origin only: a redirect to
        # another origin gets the worker's own headers, as curl and requests drop credentials.
        own_headers = {k: v for k, v in req_headers.items() if k in ("User-Agent", "Accept-Encoding", "Accept")}
        redirects: list[str] = []
        current = url
        while True:
            self.check_url(current)
            if before_hop is not None:
                await before_hop(current)
            # The first hop is the first URL's origin by definition: the origins are compared (two URL
            # parses) only after a redirect.
            hop_headers = req_headers if not redirects or _origin_of(current) == _origin_of(url) else own_headers
            if conditional and not redirects:
                hop_headers = {**hop_headers, **conditional}
            if cookies is not None:
                hop_headers = with_cookies(hop_headers, cookies.header_for(current))
            try:
                session, target, extra = self._session, current, dict[str, Any]()
                if proxy is not None:  # resolve + check the target, hand the proxy its checked address
                    session = self._proxies.session(proxy)
                    target, hop_headers, extra = await through_proxy(current, hop_headers, proxy, self._resolver)
                async with session.get(
                    target, headers=hop_headers, allow_redirects=False, timeout=timeout, **extra
                ) as resp:
                    if proxy is None:  # through a proxy the peer is the proxy, which the pool listed
                        self._check_peer(resp, current)
                    status = resp.status
                    if cookies is not None and not (proxy is not None and refused_credentials(status, resp.headers)):
                        cookies.store(current, resp.headers.getall("Set-Cookie", ()))
                    if proxy is not None and refused_credentials(status, resp.headers):
                        raise FetchError(
                            FailureClass.CONNECTION,
                            f"proxy {proxy.label} refused its credentials (HTTP {status})",
                            url=current,
                            proxy_fault=True,
                        )
                    if status in REDIRECT_STATUSES and "Location" in resp.headers:
                        location = resp.headers["Location"]
                        if len(redirects) >= limits.max_redirects:
                            raise FetchError(
                                FailureClass.BAD_CONTENT,
                                f"more than {limits.max_redirects} redirects (last to {location})",
                                status=status,
                                url=url,
                            )
                        current = urljoin(current, location)
                        redirects.append(current)
                        continue
                    if status == 304 and conditional and not redirects:
                        return _not_modified(resp, url, started)
                    error = classify_status(status, parse_retry_after(resp.headers.get("Retry-After")))
                    if error is not None:
                        error.url = current
                        raise error
                    return await self._read(resp, url, current, limits, started, redirects, content_types)
            except FetchError:
                raise
            except (aiohttp.ServerTimeoutError, aiohttp.ConnectionTimeoutError, TimeoutError) as exc:
                raise FetchError(FailureClass.TIMEOUT, f"{type(exc).__name__} fetching {current}", url=current) from exc
            except hop_errors() as exc:
                failed = proxy_failure(exc, proxy)
                if failed is not None:  # the proxy's fault: retried like a connection failure, counted apart
                    raise FetchError(
                        FailureClass.CONNECTION, f"{failed} fetching {current}", url=current, proxy_fault=True
                    ) from exc
                blocked = find_blocked(exc)
                if blocked is not None:
                    raise FetchError(
                        FailureClass.BLOCKED_ADDRESS, f"refused {current}: {blocked}", url=current
                    ) from exc
                # A certificate the CA store does not trust is a ValueError too (ssl.CertificateError):
                # a connection failure with its own message, never an "invalid URL".
                if isinstance(exc, aiohttp.InvalidURL | ValueError) and not isinstance(exc, aiohttp.ClientSSLError):
                    raise FetchError(FailureClass.INVALID_URL, f"invalid URL {current!r}", url=current) from exc
                raise FetchError(
                    FailureClass.CONNECTION, f"{type(exc).__name__} fetching {current}: {exc}", url=current
                ) from exc

    def _check_peer(self, resp: aiohttp.ClientResponse, url: str) -> None:
        conn = resp.connection
        transport = conn.transport if conn is not None else None
        peer = transport.get_extra_info("peername") if transport is not None else None
        if not peer:
            return
        reason = self._block_reason(str(peer[0]))
        if reason is not None:
            raise FetchError(FailureClass.BLOCKED_ADDRESS, f"refused {url}: connected peer {reason}", url=url)

    async def _read(
        self,
        resp: aiohttp.ClientResponse,
        url: str,
        final_url: str,
        limits: FetchLimits,
        started: float,
        redirects: list[str],
        content_types: tuple[str, ...] | None = HTML_TYPES,
    ) -> FetchResult:
        cap = limits.max_bytes
        length = resp.content_length
        if length is not None and length > cap:
            raise FetchError(FailureClass.TOO_LARGE, f"Content-Length {length} exceeds {cap} bytes", url=final_url)
        content_type = resp.headers.get("Content-Type", "")
        mime = content_type.split(";", 1)[0].strip().lower()
        if mime and content_types is not None and not mime.startswith(content_types):
            raise FetchError(FailureClass.BAD_CONTENT, f"unsupported content type {mime!r}", url=final_url)
        encoding = resp.headers.get("Content-Encoding", "").strip().lower()
        decoder = _Decoder(encoding, cap) if encoding and encoding != "identity" else None
        parts: list[bytes] = []
        wire = 0
        size = 0
        content = resp.content
        while True:
            chunk = await content.readany()
            if not chunk:
                break
            wire += len(chunk)
            if wire > cap:
                raise FetchError(FailureClass.TOO_LARGE, f"body exceeds {cap} bytes", url=final_url)
            if decoder is not None:
                chunk = decoder.feed(chunk)
            size += len(chunk)
            if size > cap:
                raise FetchError(FailureClass.TOO_LARGE, f"body exceeds {cap} bytes", url=final_url)
            parts.append(chunk)
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return FetchResult(
            url=url,
            final_url=final_url,
            status=resp.status,
            headers=dict(resp.headers),
            body=body,
            content_type=mime,
            charset=resp.charset,
            elapsed=time.monotonic() - started,
            wire_bytes=wire,
            redirects=redirects,
        )


def with_cookies(headers: dict[str, str], cookie: str | None) -> dict[str, str]:
    """``headers`` with a session's ``Cookie`` header added after the job's own one, if any."""
    if not cookie:
        return headers
    own = next((k for k in headers if k.lower() == "cookie"), None)
    if own is None:
        return {**headers, "Cookie": cookie}
    return {**{k: v for k, v in headers.items() if k != own}, "Cookie": f"{headers[own]}; {cookie}"}


def _not_modified(resp: aiohttp.ClientResponse, url: str, started: float) -> FetchResult:
    """A 304 to the validators sent: nothing to read (RFC 9110 15.4.5: a 304 has no content)."""
    return FetchResult(
        url=url,
        final_url=url,
        status=304,
        headers=dict(resp.headers),
        body=b"",
        content_type="",
        charset=None,
        elapsed=time.monotonic() - started,
        wire_bytes=0,
    )


# A pure function of the host; a crawl asks it once per page. (It was cached until a function inserted
# above it took the decorator: that one cached every 304's response, keeping up to 4,096 of them alive.)
@functools.lru_cache(maxsize=4096)
def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
