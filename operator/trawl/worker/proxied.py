"""One hop through an upstream proxy, with the address guard kept whole (docs/security.md, "Proxies").

The target's name is resolved and checked by the worker's own :class:`~trawl.egress.resolver.SafeResolver`
before anything is sent, and the proxy is handed the checked address, not the name, so it cannot resolve
the name again to another address (DNS rebinding): plain http goes as an absolute URI with the address and
a ``Host`` header with the name; https as a CONNECT (or SOCKS5 connect) to address:port, then TLS to the
name (SNI and certificate check). The proxy's own address is not checked: the pool's author listed it."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from trawl.egress.resolver import SafeResolver

from .proxies import ProxyEndpoint

# What a hop may raise besides FetchError and timeouts: aiohttp's and the OS's errors, and, once a SOCKS5
# connector exists, aiohttp_socks' (which derive from Exception only). aiohttp_socks (with python_socks) is
# imported with the first SOCKS5 proxy, not at every worker start: nothing can raise its errors before.
_HOP_ERRORS: tuple[type[Exception], ...] = (aiohttp.ClientError, OSError)
# aiohttp_socks' errors, set with the first SOCKS5 connector: the proxy's refusal (ProxyError, with its
# SOCKS error code), and the proxy unreachable (ProxyConnectionError, ProxyTimeoutError).
_SOCKS_REFUSED: tuple[type[Exception], ...] = ()
_SOCKS_UNREACHABLE: tuple[type[Exception], ...] = ()
DEFAULT_PORTS = {"http": 80, "https": 443}


def hop_errors() -> tuple[type[Exception], ...]:
    """The exceptions a hop may raise besides FetchError and timeouts (for ``except``)."""
    return _HOP_ERRORS


def _socks_connector(url: str) -> aiohttp.TCPConnector:
    """A SOCKS5 connector for the proxy at ``url``; its errors join :func:`hop_errors` from now on."""
    global _HOP_ERRORS, _SOCKS_REFUSED, _SOCKS_UNREACHABLE
    from aiohttp_socks import ProxyConnectionError, ProxyConnector, ProxyError, ProxyTimeoutError

    _SOCKS_REFUSED, _SOCKS_UNREACHABLE = (ProxyError,), (ProxyConnectionError, ProxyTimeoutError)
    _HOP_ERRORS = (aiohttp.ClientError, OSError, *_SOCKS_REFUSED, *_SOCKS_UNREACHABLE)
    return ProxyConnector.from_url(url, rdns=False, limit=0)


async def through_proxy(
    url: str, headers: dict[str, str], proxy: ProxyEndpoint, resolver: SafeResolver
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(the URL with the checked address for a host, the headers with ``Host``, aiohttp's extra arguments).

    Raises the resolver's :class:`~trawl.egress.addresses.BlockedAddressError` when the name has no allowed
    address; an IP literal was checked before (Fetcher.check_url)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    literal = _is_literal(host)
    address = host if literal else (await resolver.resolve(host, port, family=socket.AF_UNSPEC))[0]["host"]
    netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    shown = f"[{host}]" if ":" in host else host
    authority = shown if port == DEFAULT_PORTS[parts.scheme] else f"{shown}:{port}"
    extra: dict[str, Any] = {}
    if parts.scheme == "https" and not literal:
        extra["server_hostname"] = host  # TLS to the name the job asked for, through the tunnel to the address
    headers = {**headers, "Host": authority}
    if proxy.scheme in ("http", "https"):
        extra["proxy"] = proxy.bare_url
        if proxy.username is not None:
            basic = {"Proxy-Authorization": aiohttp.encode_basic_auth(proxy.username, proxy.password or "")}
            if parts.scheme == "https":
                extra["proxy_headers"] = basic  # on the CONNECT, never inside the tunnel to the site
            else:
                headers.update(basic)  # plain http: the request itself goes to the proxy
    return target, headers, extra


def refused_credentials(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a proxied response is the proxy refusing its credentials: 407, or 401 with a challenge for
    the proxy (tinyproxy answers a plain-http request so)."""
    return status == 407 or (status == 401 and "Proxy-Authenticate" in headers)


def proxy_failure(exc: BaseException, proxy: ProxyEndpoint | None) -> str | None:
    """What the proxy did wrong, when ``exc`` is the proxy's failure (refused, unreachable, 407, SOCKS
    error), else None. The text names the proxy by host:port and never holds credentials."""
    if proxy is None:
        return None
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return f"proxy {proxy.label} answered HTTP {exc.status}"
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return f"cannot connect to proxy {proxy.label}"
    if isinstance(exc, _SOCKS_REFUSED):
        return f"SOCKS proxy {proxy.label} failed (code {getattr(exc, 'error_code', None)})"
    if isinstance(exc, _SOCKS_UNREACHABLE):  # their text holds host:port only
        return f"cannot connect to SOCKS proxy {proxy.label} ({type(exc).__name__})"
    cause = exc.__cause__ or exc.__context__
    return proxy_failure(cause, proxy) if cause is not None and cause is not exc else None


class ProxySessions:
    """aiohttp sessions for proxied hops: one for every HTTP(S) proxy (aiohttp passes the proxy per request),
    one per SOCKS5 proxy (aiohttp_socks binds a connector to one proxy)."""

    def __init__(self, request_class: type[aiohttp.ClientRequest] = aiohttp.ClientRequest) -> None:
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._request_class = request_class  # the fetcher's (its politeness spacing as a request leaves)

    def session(self, proxy: ProxyEndpoint) -> aiohttp.ClientSession:
        key = "http" if proxy.scheme in ("http", "https") else proxy.url
        session = self._sessions.get(key)
        if session is None:
            connector: aiohttp.TCPConnector = (
                aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
                if key == "http"
                else _socks_connector(proxy.url)
            )
            session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent",),
                request_class=self._request_class,
            )
            self._sessions[key] = session
        return session

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


def _is_literal(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
