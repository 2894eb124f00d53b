"""The per-domain request rate shared by a pool's workers: GCRA (generic cell rate algorithm) on Redis time.

A worker asks for up to ``n`` tokens at once (``n`` is 1 at low rates, so two workers sharing 5 req/s
interleave request by request; at high rates a batch of tokens saves round trips, bounded by the burst
the rate allows anyway). This worker's adaptive delay (:mod:`.adaptive`) spaces the domain's requests
further, before any token is taken.

Redis grants a token on its clock, but the request leaves later (a new connection, a busy event loop), so
two requests granted one interval apart could reach the site closer together than that. Where the GCRA
spaces strictly (a burst of 1, under 40 requests/s) a worker also spaces a domain's requests from when the
previous one actually left: the fetcher reports that (:func:`request_left`, from aiohttp's trace of the
request's headers sent), and the hand-out of its token stands in where nothing reports it (a proxied or
rendered request). A late send delays the domain's next request rather than crowding it. Within one worker:
two workers sharing a domain are spaced by Redis's grants alone.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from contextvars import ContextVar

from redis.asyncio import Redis

from trawl.redisconn.scripts import read_script

from .domain import DomainState, RateWaitTooLong

MAX_TOKEN_BATCH = 64
TOKEN_MAX_AGE = 0.25  # seconds a batch of rate tokens may be held before the rest is dropped
RATE_SAFETY = 0.95  # share of a domain's requests-per-second actually used


def token_batch(rate: float) -> int:
    """Tokens requested per round trip: about 50 ms worth of the rate, at least 1."""
    return max(1, min(MAX_TOKEN_BATCH, int(rate * 0.05)))


def burst_for(rate: float) -> int:
    """Requests the GCRA lets through at once: 1 at low rates (strict spacing), ~50 ms worth above 20/s."""
    return token_batch(rate)


def interval_us(rate: float) -> int:
    """The GCRA's emission interval in microseconds: spaced a little wider than the limit, as sites count
    arrivals, and network jitter can bunch requests that left exactly 1/rate apart into one window."""
    return max(1, int(1_000_000 / (rate * RATE_SAFETY)))


# The domain whose request the current task is about to send: set when its token is handed out, read when
# the request's headers leave (the fetcher's trace runs in the same asyncio task, so in the same context).
SENDING: ContextVar[DomainState | None] = ContextVar("trawl_politeness_sending", default=None)


def request_left() -> None:
    """The current task's request has left: its domain's next request is spaced from now (see the module)."""
    state = SENDING.get()
    if state is not None:
        state.sent_at = max(state.sent_at, time.monotonic())
        SENDING.set(None)


class RateLimit:
    """Tokens of each domain's pool-wide rate, taken one per request."""

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str, str], str],
        domains: defaultdict[str, DomainState],
        on_wait: Callable[[str, float], None] | None = None,
    ) -> None:
        self.key = key  # (domain, kind) -> redis key
        self.on_wait = on_wait
        self._domains = domains  # added on first use; shared with the slots
        self._gcra = redis.register_script(read_script("trawl.worker", "rate_take"))

    async def take_token(
        self, domain: str, rate: float, *, adaptive: bool = True, deadline: float | None = None
    ) -> None:
        """Wait for one request's worth of the domain's pool-wide rate (and this worker's adaptive delay).

        Raises :class:`RateWaitTooLong` instead of waiting past ``deadline`` (monotonic seconds).
        """
        state = self._domains[domain]
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
        interval = interval_us(rate)
        burst = burst_for(rate)
        if state.tokens > 0 and rate >= state.tokens_rate and time.monotonic() - state.tokens_at <= TOKEN_MAX_AGE:
            # A token granted by Redis is left, fresh and at this rate: take it without the lock (nothing
            # is awaited between the check and the take). The pool-wide rate is what Redis granted; the
            # lock only serialises asking Redis for more, below.
            state.tokens -= 1
        else:
            state.token_waiters += 1
            try:
                await self._take_locked(domain, state, rate, interval, burst, deadline)
            finally:
                state.token_waiters -= 1
        if burst == 1:
            await self._spaced(state, interval / 1_000_000, deadline)
        else:
            SENDING.set(None)  # batched tokens: Redis's spacing only

    async def _spaced(self, state: DomainState, interval: float, deadline: float | None) -> None:
        """Wait until one interval after the domain's previous request left here, then count this one as
        leaving now (the fetcher moves that to when it does: :func:`request_left`)."""
        gap = state.sent_at + interval - time.monotonic()
        if gap > 0:
            if deadline is not None and time.monotonic() + gap > deadline:
                raise RateWaitTooLong(gap)
            await asyncio.sleep(gap)
        state.sent_at = max(state.sent_at, time.monotonic())
        SENDING.set(state)

    async def _take_locked(
        self, domain: str, state: DomainState, rate: float, interval: int, burst: int, deadline: float | None
    ) -> None:
        async with state.token_lock:
            if state.tokens > 0 and time.monotonic() - state.tokens_at > TOKEN_MAX_AGE:
                state.tokens = 0  # tokens of a batch left unused: do not spend them later as a burst
            if state.tokens > 0 and rate < state.tokens_rate:
                state.tokens = 0  # granted at a faster rate (e.g. before robots.txt's Crawl-delay was known)
            while state.tokens <= 0:
                want = token_batch(rate)
                granted, wait_us = await self._gcra(keys=[self.key(domain, "rate")], args=[interval, burst, want])
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
