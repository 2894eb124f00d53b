"""Upstream proxies on the worker: a group's endpoints read from the pool's mounted Secret, and which one a
request goes through.

The choice (:func:`pick`) is pure: the endpoint of the group with the fewest requests in flight, below the
group's per-proxy limit, ties broken round robin from a cursor. :class:`ProxyGroup` holds the counts and
waits, bounded, when every endpoint is full. A session (trawl.worker.sessions) pins its endpoint: ``prefer``
with ``strict``; a new session avoids the endpoints cooling down for its domain (``avoid``).

Credentials stay in :class:`ProxyEndpoint` (``auth``, never in ``label`` or ``repr``): the label, host:port,
is what logs and metrics show."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from trawl.jobspec.podfiles import read_secret

SCHEMES = ("http", "https", "socks5")
RELOAD_SECONDS = 60.0  # a Secret's update reaches the mounted file within a minute or so: read it as often


class ProxyConfigError(ValueError):
    """A line of a proxy list that is not a proxy URL (the message never holds the line: it may hold a
    password)."""


class ProxyBusy(TimeoutError):
    """Every proxy of the group stayed at its limit for the whole bounded wait."""


@dataclass(frozen=True, slots=True)
class ProxyEndpoint:
    scheme: str  # http, https (TLS to the proxy) or socks5
    host: str
    port: int
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """host:port: what logs and metrics name the proxy by (never its credentials)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def bare_url(self) -> str:
        """The proxy's URL without credentials (aiohttp's ``proxy``; credentials go as ``proxy_auth``)."""
        return f"{self.scheme}://{self.label}"

    @property
    def url(self) -> str:
        """The URL with credentials, for a SOCKS connector only (never logged)."""
        if self.username is None:
            return self.bare_url
        from urllib.parse import quote

        creds = quote(self.username, safe="") + ":" + quote(self.password or "", safe="")
        return f"{self.scheme}://{creds}@{self.label}"


def parse_proxy_list(text: str) -> list[ProxyEndpoint]:
    """The proxies of a Secret's value: one URL a line; blank lines and ``#`` comments skipped."""
    endpoints: list[ProxyEndpoint] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parts = urlsplit(line)
            port = parts.port
        except ValueError:
            raise ProxyConfigError(f"line {number} of the proxy list is not a URL") from None
        scheme = "socks5" if parts.scheme == "socks5h" else parts.scheme
        if scheme not in SCHEMES or not parts.hostname or port is None:
            raise ProxyConfigError(f"line {number} of the proxy list: want {'|'.join(SCHEMES)}://[user:pass@]host:port")
        endpoints.append(
            ProxyEndpoint(
                scheme,
                parts.hostname,
                port,
                unquote(parts.username) if parts.username is not None else None,
                unquote(parts.password) if parts.password is not None else None,
            )
        )
    return endpoints


def pick(
    in_use: Sequence[int],
    limit: int,
    cursor: int,
    prefer: int | None = None,
    avoid: frozenset[int] = frozenset(),
    strict: bool = False,
) -> int | None:
    """The index of the endpoint to use, or None when all are at ``limit``: ``prefer`` if it has room (with
    ``strict``, only ``prefer``: a session keeps its proxy), else the least in use, ties broken by the first
    at or after ``cursor`` (round robin), those in ``avoid`` (cooling down) only when all others are."""
    if prefer is not None and 0 <= prefer < len(in_use):
        if in_use[prefer] < limit:
            return prefer
        if strict:
            return None
    best: int | None = None
    n = len(in_use)
    for step in range(n):
        i = (cursor + step) % n
        if in_use[i] >= limit:
            continue
        if best is None or (i in avoid, in_use[i]) < (best in avoid, in_use[best]):
            best = i
    return best


class ProxyGroup:
    """One group's endpoints on this worker, with their requests in flight."""

    def __init__(self, name: str, endpoints: Sequence[ProxyEndpoint], max_per_proxy: int) -> None:
        if not endpoints:
            raise ProxyConfigError(f"proxy group {name!r} lists no proxy")
        self.name = name
        self.endpoints = list(endpoints)
        self.max_per_proxy = max_per_proxy
        self.in_use = [0] * len(self.endpoints)
        self._cursor = 0
        self._freed = asyncio.Condition()

    def index_of(self, label: str) -> int | None:
        """The endpoint whose host:port is ``label`` (a session's proxy), if the group still lists it."""
        return next((i for i, e in enumerate(self.endpoints) if e.label == label), None)

    def _take(self, prefer: int | None, avoid: frozenset[int] = frozenset(), strict: bool = False) -> int | None:
        index = pick(self.in_use, self.max_per_proxy, self._cursor, prefer, avoid, strict)
        if index is not None:
            self.in_use[index] += 1
            self._cursor = (index + 1) % len(self.endpoints)
        return index

    @asynccontextmanager
    async def use(
        self, wait: float, prefer: int | None = None, avoid: frozenset[int] = frozenset(), strict: bool = False
    ) -> AsyncIterator[ProxyEndpoint]:
        """An endpoint for one fetch (see :func:`pick`); waits up to ``wait`` seconds for room, then raises
        :class:`ProxyBusy`."""
        index = self._take(prefer, avoid, strict)
        if index is None:
            deadline = time.monotonic() + wait
            async with self._freed:
                while index is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ProxyBusy(f"every proxy of group {self.name!r} is at its limit of {self.max_per_proxy}")
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._freed.wait(), left)
                    index = self._take(prefer, avoid, strict)
        try:
            yield self.endpoints[index]
        finally:
            self.in_use[index] -= 1
            async with self._freed:
                self._freed.notify()


class ProxyDirectory:
    """The worker's proxy groups, read from the mounted Secrets the job specs name, re-read every minute."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._groups: dict[tuple[str, str, str, int], tuple[float, ProxyGroup]] = {}

    def group(self, route: Mapping[str, Any]) -> ProxyGroup:
        """The group a worker spec's ``proxy`` names (trawl.jobspec.wire.proxy_route); raises
        :class:`~trawl.jobspec.podfiles.MissingSecret` or :class:`ProxyConfigError`."""
        secret = route["secret"]
        key = (str(route["group"]), str(secret["name"]), str(secret["key"]), int(route["max_per_proxy"]))
        cached = self._groups.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < RELOAD_SECONDS:
            return cached[1]
        endpoints = parse_proxy_list(read_secret(key[1], key[2], self._environ).decode("utf-8", "replace"))
        if cached is not None and cached[1].endpoints == endpoints:
            self._groups[key] = (now, cached[1])  # unchanged: keep the counts of requests in flight
            return cached[1]
        group = ProxyGroup(key[0], endpoints, key[3])
        self._groups[key] = (now, group)
        return group
