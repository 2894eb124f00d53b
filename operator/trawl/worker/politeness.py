"""Polite fetching: robots.txt cached in Redis, per-domain rate and concurrency shared by a pool's
workers (Lua scripts on the pool's Redis, under its hash tag), and an adaptive per-domain delay.

Rate: GCRA (generic cell rate algorithm) on Redis time. A worker asks for up to ``n`` tokens at once
(``n`` is 1 at low rates, so two workers sharing 5 req/s interleave request by request; at high rates
a batch of tokens saves round trips, bounded by the burst the rate allows anyway).

Concurrency: a sorted set of slot leases per domain (member -> expiry). A worker leases slots, reuses
them locally while it has queued requests for the domain, returns them when it has none, and never
keeps one longer than ``SLOT_HOLD_SECONDS`` without giving other workers a chance. Leases expire, so a
killed worker cannot hold a domain's slots for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from protego import Protego
from redis.asyncio import Redis

from trawl.api.policies import FailureClass
from trawl.redisconn.scripts import read_script

from .fetch import FetchError

log = logging.getLogger("trawl.worker.politeness")

SLOT_LEASE_MS = 30_000
SLOT_HOLD_SECONDS = 2.0
LARGE_LIMIT = 16  # from this per-domain limit up, slots are leased in batches and kept while young
MAX_TOKEN_BATCH = 64
TOKEN_MAX_AGE = 0.25  # seconds a batch of rate tokens may be held before the rest is dropped


RATE_SAFETY = 0.95  # share of a domain's requests-per-second actually used


def token_batch(rate: float) -> int:
    """Tokens requested per round trip: about 50 ms worth of the rate, at least 1."""
    return max(1, min(MAX_TOKEN_BATCH, int(rate * 0.05)))


def burst_for(rate: float) -> int:
    """Requests the GCRA lets through at once: 1 at low rates (strict spacing), ~50 ms worth above 20/s."""
    return token_batch(rate)


@dataclass
class AdaptiveDelay:
    """Per-domain extra delay that grows with latency and errors and decays when the site is healthy.

    ``delay = max(0, latency_ewma - fast) * latency_weight + latency_ewma * error_ewma * error_weight``,
    capped at ``max_delay``. A domain answering fast and without errors gets no delay at all.

    The error rate and the excess latency also fade with time (half-life ``half_life`` seconds since the
    last observation): a long delay means few observations, so a slowdown that only new answers could
    undo would outlive the trouble by many minutes (one timeout spaced a host's requests 25-30 s apart
    for later jobs). Sustained trouble is the circuit breaker's business (:mod:`trawl.worker.breaker`).
    """

    fast: float = 1.0  # latency (s) below which a site is not slowed down for being slow
    latency_weight: float = 1.0
    error_weight: float = 8.0
    max_delay: float = 30.0
    alpha: float = 0.2
    half_life: float = 15.0
    latency_ewma: float = 0.0
    error_ewma: float = 0.0
    samples: int = 0
    last_at: float = 0.0  # monotonic time of the last observation

    def _faded(self, now: float) -> tuple[float, float]:
        """(latency_ewma, error_ewma) faded by the time since the last observation."""
        if self.samples == 0 or now <= self.last_at:
            return self.latency_ewma, self.error_ewma
        f = 0.5 ** ((now - self.last_at) / self.half_life)
        latency = self.latency_ewma
        if latency > self.fast:
            latency = self.fast + (latency - self.fast) * f
        return latency, self.error_ewma * f

    def observe(self, latency: float, error: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.latency_ewma, self.error_ewma = self._faded(now)
        if self.samples == 0:
            self.latency_ewma = latency
        else:
            self.latency_ewma += self.alpha * (latency - self.latency_ewma)
        self.error_ewma += self.alpha * ((1.0 if error else 0.0) - self.error_ewma)
        self.samples += 1
        self.last_at = now

    def delay_at(self, now: float) -> float:
        latency, errors = self._faded(now)
        slow = max(0.0, latency - self.fast) * self.latency_weight
        erring = latency * errors * self.error_weight if errors > 0.01 else 0.0
        return min(self.max_delay, slow + erring)

    @property
    def delay(self) -> float:
        return self.delay_at(time.monotonic())


@dataclass
class _Domain:
    tokens: int = 0
    tokens_at: float = 0.0
    tokens_rate: float = 0.0  # the rate the held tokens were granted at
    token_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    slots: list[str] = field(default_factory=list)  # leased members not in use
    slots_all: dict[str, float] = field(default_factory=dict)  # member -> monotonic time leased
    # Given back while Redis did not answer: returned by the next refresh, or their leases would hold the
    # domain's slots for up to SLOT_LEASE_MS after Redis (or a promoted replica) is back.
    unreturned: set[str] = field(default_factory=set)
    waiters: int = 0
    slot_event: asyncio.Event = field(default_factory=asyncio.Event)
    slot_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    adaptive: AdaptiveDelay = field(default_factory=AdaptiveDelay)
    next_start: float = 0.0
    limit: int = 0


class RateWaitTooLong(Exception):
    """The domain's rate limit would keep the task waiting longer than the worker holds a lease for it."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"rate limit: next slot in {wait:.2f}s")
        self.wait = wait


class _Slot:
    """The context manager of :meth:`DomainLimiter.slot`: a plain class, as it is entered once per request
    (a generator-based one costs a generator and its frames each time)."""

    __slots__ = ("deadline", "domain", "limit", "limiter", "member")

    def __init__(self, limiter: DomainLimiter, domain: str, limit: int, deadline: float | None) -> None:
        self.limiter = limiter
        self.domain = domain
        self.limit = limit
        self.deadline = deadline
        self.member: str | None = None

    async def __aenter__(self) -> None:
        self.member = await self.limiter._take_slot(self.domain, self.limit, self.deadline)

    async def __aexit__(self, *exc: object) -> None:
        if self.member is not None:
            member, self.member = self.member, None
            await self.limiter._give_slot(self.domain, member)


class DomainLimiter:
    """Pool-wide per-domain rate and concurrency, plus this worker's adaptive delay."""

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str, str], str],
        worker_id: str,
        *,
        max_wait: float = 10.0,
        on_wait: Callable[[str, float], None] | None = None,
    ) -> None:
        self.redis = redis
        self.key = key  # (domain, kind) -> redis key
        self.worker_id = worker_id
        self.max_wait = max_wait
        self.on_wait = on_wait
        self._domains: dict[str, _Domain] = {}
        self._gcra = redis.register_script(read_script("trawl.worker", "rate_take"))
        self._acquire = redis.register_script(read_script("trawl.worker", "slots_acquire"))
        self._refresh = redis.register_script(read_script("trawl.worker", "slots_refresh"))
        self._serial = itertools.count()

    def _domain(self, domain: str) -> _Domain:
        state = self._domains.get(domain)
        if state is None:
            state = self._domains[domain] = _Domain()
        return state

    def adaptive(self, domain: str) -> AdaptiveDelay:
        return self._domain(domain).adaptive

    async def take_token(
        self, domain: str, rate: float, *, adaptive: bool = True, deadline: float | None = None
    ) -> None:
        """Wait for one request's worth of the domain's pool-wide rate (and this worker's adaptive delay).

        Raises :class:`RateWaitTooLong` instead of waiting past ``deadline`` (monotonic seconds).
        """
        state = self._domain(domain)
        if adaptive:
            delay = state.adaptive.delay
            if delay > 0:
                now = time.monotonic()
                start = max(now, state.next_start)
                if deadline is not None and start > deadline:
                    raise RateWaitTooLong(start - now)
                state.next_start = start + delay
                if start > now:
                    await asyncio.sleep(start - now)
        # Spaced a little wider than the limit: sites count arrivals, and network jitter can bunch
        # requests that left exactly 1/rate apart into one window.
        if state.tokens > 0 and rate >= state.tokens_rate and time.monotonic() - state.tokens_at <= TOKEN_MAX_AGE:
            # A token granted by Redis is left, fresh and at this rate: take it without the lock (nothing
            # is awaited between the check and the take). The pool-wide rate is what Redis granted; the
            # lock only serialises asking Redis for more, below.
            state.tokens -= 1
            return
        interval_us = max(1, int(1_000_000 / (rate * RATE_SAFETY)))
        burst = burst_for(rate)
        async with state.token_lock:
            if state.tokens > 0 and time.monotonic() - state.tokens_at > TOKEN_MAX_AGE:
                state.tokens = 0  # tokens of a batch left unused: do not spend them later as a burst
            if state.tokens > 0 and rate < state.tokens_rate:
                state.tokens = 0  # granted at a faster rate (e.g. before robots.txt's Crawl-delay was known)
            while state.tokens <= 0:
                want = token_batch(rate)
                granted, wait_us = await self._gcra(keys=[self.key(domain, "rate")], args=[interval_us, burst, want])
                granted = int(granted)
                if granted > 0:
                    state.tokens += granted
                    state.tokens_at = time.monotonic()
                    state.tokens_rate = rate
                    break
                wait = int(wait_us) / 1_000_000
                if deadline is not None and time.monotonic() + wait > deadline:
                    raise RateWaitTooLong(wait)
                if self.on_wait is not None:
                    self.on_wait(domain, wait)
                await asyncio.sleep(wait)
            state.tokens -= 1

    def slot(self, domain: str, limit: int, *, deadline: float | None = None) -> _Slot:
        """Hold one of the domain's pool-wide concurrency slots for the duration of the block
        (``async with limiter.slot(...)``; given back however the block ends)."""
        return _Slot(self, domain, limit, deadline)

    async def _take_slot(self, domain: str, limit: int, deadline: float | None) -> str:
        state = self._domain(domain)
        state.limit = limit
        state.waiters += 1
        try:
            pause = 0.01
            while True:
                if state.slots:
                    return state.slots.pop()
                async with state.slot_lock:
                    if state.slots:
                        return state.slots.pop()
                    want = max(1, min(state.waiters, 8 if limit >= LARGE_LIMIT else 1))
                    first = next(self._serial)
                    for _ in range(want - 1):
                        next(self._serial)
                    prefix = f"{self.worker_id}:"
                    granted = int(
                        await self._acquire(
                            keys=[self.key(domain, "conc")], args=[limit, want, SLOT_LEASE_MS, prefix, first]
                        )
                    )
                    if granted:
                        now = time.monotonic()
                        members = [f"{prefix}{first + i}" for i in range(granted)]
                        for m in members:
                            state.slots_all[m] = now
                        state.slots.extend(members[1:])
                        if len(members) > 1:
                            state.slot_event.set()
                        return members[0]
                if deadline is not None and time.monotonic() + pause > deadline:
                    raise RateWaitTooLong(pause)
                state.slot_event.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await state.slot_event.wait()
                pause = min(pause * 1.5, 0.2)
        finally:
            state.waiters -= 1

    async def _give_slot(self, domain: str, member: str) -> None:
        state = self._domain(domain)
        leased = state.slots_all.get(member)
        # Keep the slot for the next local request while it is young: always when someone here waits, and
        # also idle when the limit is large (returning and re-leasing each slot would cost two round trips
        # per request). Idle slots are returned by :meth:`refresh` once older than SLOT_HOLD_SECONDS.
        keep = (
            (state.waiters > 0 or state.limit >= LARGE_LIMIT)
            and leased is not None
            and time.monotonic() - leased < SLOT_HOLD_SECONDS
        )
        if keep:
            state.slots.append(member)
            state.slot_event.set()
            return
        state.slots_all.pop(member, None)
        try:
            await self.redis.zrem(self.key(domain, "conc"), member)
        except Exception as exc:
            state.unreturned.add(member)
            log.warning("could not return slot %s of %s (retried at the next heartbeat): %s", member, domain, exc)

    async def refresh(self) -> None:
        """Return idle slots that are old, extend the other leases (called from the heartbeat loop)."""
        now = time.monotonic()
        for domain, state in list(self._domains.items()):
            stale = [m for m in state.slots if now - state.slots_all.get(m, 0.0) >= SLOT_HOLD_SECONDS]
            if stale:
                state.slots = [m for m in state.slots if m not in stale]
                for m in stale:
                    state.slots_all.pop(m, None)
                state.unreturned.update(stale)
            if state.unreturned:
                # Members are this worker's own (unique per lease), so removing one already expired or
                # never replicated to a promoted replica is a no-op, never someone else's slot.
                await self.redis.zrem(self.key(domain, "conc"), *state.unreturned)
                state.unreturned.clear()
            if state.slots_all:
                await self._refresh(keys=[self.key(domain, "conc")], args=[SLOT_LEASE_MS, *state.slots_all])
            elif state.waiters == 0 and state.tokens <= 0 and state.adaptive.delay == 0:
                self._domains.pop(domain, None)

    async def release_all(self) -> None:
        for domain, state in list(self._domains.items()):
            members = [*state.slots_all, *state.unreturned]
            if members:
                with contextlib.suppress(Exception):
                    await self.redis.zrem(self.key(domain, "conc"), *members)
                state.slots_all.clear()
                state.slots.clear()
                state.unreturned.clear()


# --- robots.txt ----------------------------------------------------------------------------------

ALLOW_ALL = "A"
DISALLOW_ALL = "D"
UNAVAILABLE = "U"  # robots.txt answered 5xx or could not be fetched: a temporary complete disallow
ROBOTS_MAX_BYTES = 512 * 1024
UNAVAILABLE_SECONDS = 30.0  # how long a 5xx robots.txt holds the origin's tasks back before it is asked again
MAX_CRAWL_DELAY = 30.0  # a larger robots.txt Crawl-delay is honoured as this (a task must finish some day)


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
        origin = _origin(url)
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
        if entry.disallow_all:
            return False
        if entry.parser is None:
            return True
        return bool(entry.parser.can_fetch(url, user_agent))

    def crawl_delay(self, url: str, user_agent: str) -> float | None:
        """The origin's robots.txt ``Crawl-delay`` for ``user_agent`` (seconds, capped), if it has one;
        only meaningful after :meth:`allowed` loaded the origin."""
        entry = self._local.get(_origin(url))
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
            if exc.failure_class == FailureClass.HTTP_4XX:
                return ALLOW_ALL
            if exc.failure_class in (FailureClass.TOO_LARGE, FailureClass.BAD_CONTENT):
                return ALLOW_ALL
            if exc.failure_class in (FailureClass.BLOCKED_ADDRESS, FailureClass.INVALID_URL):
                raise  # the origin itself is refused: its pages fail the same way, for good
            return UNAVAILABLE + f"robots.txt of {origin} unavailable ({exc.failure_class.value}): {exc.message}"
        if 200 <= status < 300:
            return "R" + text
        return ALLOW_ALL


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def robots_key_factory(prefix_key: Callable[[str, str], str]) -> Callable[[str], str]:
    return lambda origin: prefix_key(origin, "robots")
