"""robots.txt per origin (scheme://host:port), cached in the pool's Redis and in this worker's memory.

What is cached is decided by the pure functions :func:`answered` and :func:`unanswered`: the file's text,
allow all, or a temporary complete disallow (RFC 9309); :class:`RobotsCache` does the I/O around them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from protego import Protego
from redis.asyncio import Redis

from trawl.api.plain import FailureClass

from ..fetch import Fetcher, FetchError, FetchLimits

ALLOW_ALL = "A"
DISALLOW_ALL = "D"
UNAVAILABLE = "U"  # robots.txt answered 5xx or could not be fetched: a temporary complete disallow
ROBOTS_MAX_BYTES = 512 * 1024
UNAVAILABLE_SECONDS = 30.0  # how long a 5xx robots.txt holds the origin's tasks back before it is asked again
MAX_CRAWL_DELAY = 30.0  # a larger robots.txt Crawl-delay is honoured as this (a task must finish some day)
ROBOTS_LIMITS = FetchLimits(max_bytes=ROBOTS_MAX_BYTES, max_redirects=5, total_timeout=15.0, read_timeout=15.0)


def origin_of(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def fetch_with(fetcher: Fetcher) -> Callable[[str, Any], Awaitable[tuple[int, str]]]:
    """The fetch of a :class:`RobotsCache` through the worker's fetcher (its address policy, ``hook`` before
    each hop), under robots.txt's own limits."""

    async def fetch(url: str, hook: Any) -> tuple[int, str]:
        result = await fetcher.fetch(url, limits=ROBOTS_LIMITS, before_hop=hook)
        return result.status, result.text()

    return fetch


def answered(status: int, text: str) -> str:
    """What is cached for a robots.txt the fetcher returned: its text on 2xx, else allow all (the fetcher
    raises on the other statuses: see :func:`unanswered`)."""
    if 200 <= status < 300:
        return "R" + text
    return ALLOW_ALL


def unanswered(origin: str, exc: FetchError) -> str | None:
    """What is cached for a robots.txt fetch that failed with ``exc``: allow all (4xx, too large, bad
    content), a temporary complete disallow (5xx, 429, timeouts, unreachable), or None when the origin
    itself is refused (blocked address, invalid URL: its pages fail the same way, for good)."""
    if exc.failure_class == FailureClass.HTTP_4XX:
        return ALLOW_ALL
    if exc.failure_class in (FailureClass.TOO_LARGE, FailureClass.BAD_CONTENT):
        return ALLOW_ALL
    if exc.failure_class in (FailureClass.BLOCKED_ADDRESS, FailureClass.INVALID_URL):
        return None
    return UNAVAILABLE + f"robots.txt of {origin} unavailable ({exc.failure_class.value}): {exc.message}"


@dataclass
class _Robots:
    parser: Protego | None  # None: allow all
    disallow_all: bool
    expires: float
    unavailable: str | None = None  # why robots.txt could not be read (temporary disallow)


class RobotsUnavailable(FetchError):
    """robots.txt answered 5xx or was unreachable: nothing of the origin is fetched for a while (RFC 9309
    2.3.1.4). Raised with ``retry_after``, so the task is given back without spending an attempt."""


class RobotsCache:
    """robots.txt per scheme://host:port, parsed with protego, cached in Redis (TTL) and in memory.

    Only one worker of the pool fetches a host's robots.txt at a time (a short Redis lock); the others
    wait for the cached copy. 4xx means allow all; 5xx or an unreachable host is a complete disallow for
    ``UNAVAILABLE_SECONDS`` (RFC 9309), cached like any answer: tasks of the origin are given back with
    that delay (:class:`RobotsUnavailable`, no attempt spent) and robots.txt is asked again after it.
    ``Crawl-delay`` is read for the user agent (:meth:`crawl_delay`).
    """

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str], str],
        fetch: Callable[[str, Any], Awaitable[tuple[int, str]]],
        *,
        local_seconds: float = 60.0,
        unavailable_seconds: float = UNAVAILABLE_SECONDS,
    ) -> None:
        self.redis = redis
        self.unavailable_seconds = unavailable_seconds
        self.key = key
        self.fetch = fetch  # (url, hop hook) -> (status, text); raises FetchError
        self.local_seconds = local_seconds
        self._local: dict[str, _Robots] = {}
        self._pending: dict[str, asyncio.Future[_Robots]] = {}
        self.fetches = 0

    async def allowed(self, url: str, user_agent: str, ttl: int, hook: Any = None) -> bool:
        """Whether robots.txt lets ``user_agent`` fetch ``url``; ``hook`` runs before each robots.txt request
        (the caller's rate limit: a robots.txt fetch is a request to the site like any other)."""
        entry = await self._entry(url, ttl, hook)
        if entry.disallow_all:
            return False
        if entry.parser is None:
            return True
        return bool(entry.parser.can_fetch(url, user_agent))

    async def sitemaps(self, url: str, ttl: int, hook: Any = None) -> list[str]:
        """The ``Sitemap:`` lines of the robots.txt of ``url``'s origin (loaded like :meth:`allowed`; none
        when it has no robots.txt). Raises :class:`RobotsUnavailable` as :meth:`allowed` does."""
        entry = await self._entry(url, ttl, hook)
        return list(entry.parser.sitemaps) if entry.parser is not None else []

    async def _entry(self, url: str, ttl: int, hook: Any) -> _Robots:
        """The origin's robots.txt, loaded when not known or expired; raises :class:`RobotsUnavailable`."""
        origin = origin_of(url)
        entry = self._local.get(origin)
        if entry is None or entry.expires < time.monotonic():
            entry = await self._load(origin, ttl, hook)
        if entry.unavailable is not None:
            raise RobotsUnavailable(
                FailureClass.HTTP_5XX,
                entry.unavailable,
                url=url,
                retry_after=max(1.0, entry.expires - time.monotonic()),
            )
        return entry

    def crawl_delay(self, url: str, user_agent: str) -> float | None:
        """The origin's robots.txt ``Crawl-delay`` for ``user_agent`` (seconds, capped), if it has one;
        only meaningful after :meth:`allowed` loaded the origin."""
        entry = self._local.get(origin_of(url))
        if entry is None or entry.parser is None:
            return None
        delay = entry.parser.crawl_delay(user_agent)
        return min(float(delay), MAX_CRAWL_DELAY) if delay else None

    async def _load(self, origin: str, ttl: int, hook: Any) -> _Robots:
        pending = self._pending.get(origin)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[_Robots] = asyncio.get_running_loop().create_future()
        self._pending[origin] = future
        try:
            entry = await self._load_shared(origin, ttl, hook)
            self._local[origin] = entry
            future.set_result(entry)
            return entry
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved
            raise
        finally:
            self._pending.pop(origin, None)

    def _parse(self, raw: str, ttl: int) -> _Robots:
        expires = time.monotonic() + min(ttl, self.local_seconds)
        if raw.startswith(UNAVAILABLE):
            return _Robots(None, True, time.monotonic() + self.unavailable_seconds, unavailable=raw[1:])
        if raw == ALLOW_ALL:
            return _Robots(None, False, expires)
        if raw == DISALLOW_ALL:
            return _Robots(None, True, expires)
        return _Robots(Protego.parse(raw[1:]), False, expires)

    async def _load_shared(self, origin: str, ttl: int, hook: Any) -> _Robots:
        key = self.key(origin)
        lock = key + ":lock"
        deadline = time.monotonic() + 15
        while True:
            cached = await self.redis.get(key)
            if cached is not None:
                return self._parse(cached.decode("utf-8", "replace") if isinstance(cached, bytes) else cached, ttl)
            if await self.redis.set(lock, "1", nx=True, ex=30) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        try:
            raw = await self._fetch(origin, hook)
            unavailable_ms = max(1, int(self.unavailable_seconds * 1000))
            if raw.startswith(UNAVAILABLE):
                await self.redis.set(key, raw, px=unavailable_ms)
            else:
                await self.redis.set(key, raw, ex=ttl)
            return self._parse(raw, ttl)
        finally:
            await self.redis.delete(lock)

    async def _fetch(self, origin: str, hook: Any) -> str:
        self.fetches += 1
        try:
            status, text = await self.fetch(origin + "/robots.txt", hook)
        except FetchError as exc:
            cached = unanswered(origin, exc)
            if cached is None:
                raise
            return cached
        return answered(status, text)
