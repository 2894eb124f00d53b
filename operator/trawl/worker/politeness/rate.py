"""The per-domain request rate shared by a pool's workers: GCRA (generic cell rate algorithm) on Redis time.

A worker asks for up to ``n`` tokens at once (``n`` is 1 at low rates, so two workers sharing 5 req/s
interleave request by request; at high rates a batch of tokens saves round trips, bounded by the burst
the rate allows anyway). This worker's adaptive delay (:mod:`.adaptive`) spaces the domain's requests
further, before any token is taken. A token due later is reserved by the call that learns its wait (the
task sleeps until it is due, and asks Redis nothing more), unless it is due after the task's deadline; one
may also come with the slot of the task's request (:class:`Prepaid`, :mod:`.slots`): one round trip for
both.

Redis grants a token on its clock, but the request leaves later (a new connection, a busy event loop), so
two requests granted one interval apart could reach the site closer together than that, or even swap
places (the first still connecting when the second leaves). Where the GCRA spaces strictly (a burst of 1,
under 40 requests/s) a worker also spaces a domain's requests as they leave: the fetcher awaits
:func:`before_send` as aiohttp sends a request, right before it writes its headers (``fetch.spaced_request``),
which waits until one interval after the domain's previous request left. A late send delays the domain's
next request rather than crowding it. Within one worker, for the fetcher's requests, direct or proxied (a
browser's are spaced by Redis's grants alone, as two workers sharing a domain are).
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
from .parking import Parking, Stay

MAX_TOKEN_BATCH = 64
TOKEN_MAX_AGE = 0.25  # seconds a batch of rate tokens may be held before the rest is dropped
RATE_SAFETY = 0.95  # share of a domain's requests-per-second actually used
RESERVE_US = 3_600_000_000  # with no deadline, a token due within this is reserved (the wait is taken anyway)


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


class Prepaid:
    """A rate token taken with the slot of the current task's request (:mod:`.slots`: one round trip for both),
    spent by the task's first :meth:`RateLimit.take_token` for the domain, at its rate or a lower one, no
    earlier than ``due`` (monotonic) and no later than TOKEN_MAX_AGE after it. Spent once, though copies
    of the task's context (a child task) all see it."""

    __slots__ = ("due", "rate", "spent", "state")

    def __init__(self, state: DomainState, rate: float, due: float) -> None:
        self.state = state
        self.rate = rate
        self.due = due
        self.spent = False


# The current task's prepaid token, if it has one (set by .slots when its slot is leased).
PREPAID: ContextVar[Prepaid | None] = ContextVar("trawl_politeness_prepaid", default=None)


# The domain whose request the current task is about to send, and its interval in seconds: set when its
# token is handed out, read by :func:`before_send` (the fetcher's request runs in the same asyncio task, so in
# the same context).
SENDING: ContextVar[tuple[DomainState, float] | None] = ContextVar("trawl_politeness_sending", default=None)


async def before_send() -> None:
    """Called by the fetcher right before the current task's request headers are written: wait until one
    interval after the domain's previous request left this worker, then count this one as leaving now.
    Nothing is awaited between the last check and the write, so two requests of a domain leave in the
    order they pass here, one interval apart, however late either was (see the module)."""
    pending = SENDING.get()
    if pending is None:
        return
    SENDING.set(None)
    state, interval = pending
    while True:  # at most one interval: sent_at is never ahead of the clock
        gap = state.sent_at + interval - time.monotonic()
        if gap <= 0:
            break
        await asyncio.sleep(gap)  # and check again: another request of the domain may have left meanwhile
    state.sent_at = time.monotonic()
    state.spaced_until = state.sent_at + interval


class RateLimit:
    """Tokens of each domain's pool-wide rate, taken one per request."""

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str, str], str],
        domains: defaultdict[str, DomainState],
        on_wait: Callable[[str, float], None] | None = None,
        parking: Parking | None = None,
    ) -> None:
        self.key = key  # (domain, kind) -> redis key
        self.on_wait = on_wait
        self.parking = parking or Parking()  # a task waiting here gives its place to another (.parking)
        self._domains = domains  # added on first use; shared with the slots
        self._gcra = redis.register_script(read_script("trawl.worker", "rate_take"))

    async def take_token(
        self, domain: str, rate: float, *, adaptive: bool = True, deadline: float | None = None
    ) -> None:
        """Wait for one request's worth of the domain's pool-wide rate (and this worker's adaptive delay).

        Raises :class:`RateWaitTooLong` instead of waiting past ``deadline`` (monotonic seconds). The task is
        parked while it waits, and back in a place when this returns (:mod:`.parking`).
        """
        state = self._domains[domain]
        interval = interval_us(rate)
        stay = self.parking.stay()
        try:
            await self._take_token(state, domain, rate, interval, adaptive, deadline, stay)
            # Back in a place before the request: its spacing (before_send) is measured as it leaves, and
            # that sleep keeps the place (it holds a connection, which a parked task must not).
            await stay.back()
        except BaseException:
            stay.drop()
            raise

    async def _take_token(
        self,
        state: DomainState,
        domain: str,
        rate: float,
        interval: int,
        adaptive: bool,
        deadline: float | None,
        stay: Stay,
    ) -> None:
        if adaptive:
            delay = state.adaptive.delay
            if delay > 0:
                now = time.monotonic()
                start = max(now, state.next_start)
                if deadline is not None and start > deadline:
                    raise RateWaitTooLong(start - now)
                state.next_start = start + delay
                if start > now:
                    stay.park()
                    await asyncio.sleep(start - now)
        burst = burst_for(rate)
        prepaid = PREPAID.get()
        if prepaid is not None and prepaid.state is state and not prepaid.spent:
            prepaid.spent = True
            PREPAID.set(None)
            if rate >= prepaid.rate and time.monotonic() - prepaid.due <= TOKEN_MAX_AGE:
                await self._spend(domain, state, rate, prepaid.due, stay)
                SENDING.set((state, interval / 1_000_000) if burst == 1 else None)
                return
            # else dropped: granted at a faster rate (robots.txt's Crawl-delay), or too long ago
        if state.tokens > 0 and rate >= state.tokens_rate and time.monotonic() - state.tokens_at <= TOKEN_MAX_AGE:
            # A token granted by Redis is left, fresh and at this rate: take it without the lock (nothing
            # is awaited between the check and the take). The pool-wide rate is what Redis granted; the
            # lock only serialises asking Redis for more, below.
            state.tokens -= 1
        else:
            state.token_waiters += 1
            try:
                await self._take_locked(domain, state, rate, interval, burst, deadline, stay)
            finally:
                state.token_waiters -= 1
        # strict spacing: the fetcher spaces the request from the domain's previous one as it leaves
        SENDING.set((state, interval / 1_000_000) if burst == 1 else None)

    async def _spend(self, domain: str, state: DomainState, rate: float, due: float, stay: Stay) -> None:
        """Wait until a prepaid token is due (counted among the domain's token waiters, as one waiting for
        Redis's grant would be)."""
        wait = due - time.monotonic()
        if wait > 0:
            if self.on_wait is not None:
                self.on_wait(domain, wait)
            state.token_waiters += 1
            try:
                stay.park()
                await asyncio.sleep(wait)
            finally:
                state.token_waiters -= 1
        state.tokens_at = time.monotonic()
        state.tokens_rate = rate

    async def _take_locked(
        self,
        domain: str,
        state: DomainState,
        rate: float,
        interval: int,
        burst: int,
        deadline: float | None,
        stay: Stay,
    ) -> None:
        if state.token_lock.locked():  # another task of the domain asks Redis or waits for the next token
            stay.park()
        async with state.token_lock:
            if state.tokens > 0 and time.monotonic() - state.tokens_at > TOKEN_MAX_AGE:
                state.tokens = 0  # tokens of a batch left unused: do not spend them later as a burst
            if state.tokens > 0 and rate < state.tokens_rate:
                state.tokens = 0  # granted at a faster rate (e.g. before robots.txt's Crawl-delay was known)
            while state.tokens <= 0:
                # The next token is reserved when it is due before the deadline: one round trip per token,
                # not one to learn the wait and another to take the token once it is over.
                reserve = RESERVE_US if deadline is None else int((deadline - time.monotonic()) * 1_000_000)
                granted, wait_us = await self._gcra(
                    keys=[self.key(domain, "rate")], args=[interval, burst, token_batch(rate), reserve]
                )
                granted, wait = int(granted), int(wait_us) / 1_000_000
                if wait > 0:
                    if granted <= 0 and deadline is not None and time.monotonic() + wait > deadline:
                        raise RateWaitTooLong(wait)
                    if self.on_wait is not None:
                        self.on_wait(domain, wait)
                    stay.park()  # back in a place after the lock is released: no task waits for it in a place
                    await asyncio.sleep(wait)  # a reserved token is due then: its request leaves no earlier
                if granted > 0:
                    state.tokens += granted
                    state.tokens_at = time.monotonic()
                    state.tokens_rate = rate
            state.tokens -= 1
