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
browser's are spaced by Redis's grants alone).

That spacing does not reach another worker's requests: worker A's token due at T leaving at T + 0.2 s
(its loop busy) and worker B's due at T + I leaving on time would reach the site I - 0.2 s apart (issue
37: two workers on one host under CPU pressure). So :func:`before_send` also checks how late the request
leaves after its token was due on Redis's clock (every script that grants a token returns Redis's
``now``; :class:`~.lateness.RedisClock` maps it onto this worker's clock, so a reply that sat unread
counts as late). Each token reserves a margin after its due time for the worker's usual lateness
(:class:`~.lateness.Lag`: a busy worker's next token of the domain comes that much later, instead of its
requests each costing a round trip). Within ``LATE_SHARE`` of an interval after due time + margin (the
common case) the request leaves, asking Redis nothing more; later, one ``rate_late`` call: if no later
token of the domain was granted, or only to this worker (``DomainState.timeline_us``: its own later requests
are spaced from this one as they leave, and checked in turn), it leaves now and the domain's timeline moves
(the next token is due an interval after it); else it takes a fresh token at the end of the timeline,
waits for it, and checks again (that reply may be read late too). So every strictly spaced request, from
any worker, leaves at most LATE_SHARE of an interval after the latest time Redis assigned it (due time +
margin), and the next is due an interval after that. A fresh token past the task's deadline raises
:class:`RateWaitTooLong` (the task is given back, as for any rate wait too long). ``on_late`` counts the
late requests by outcome (``moved``, ``retaken``, ``deferred``): the extra round trips.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import defaultdict
from collections.abc import Callable
from contextvars import ContextVar
from typing import Protocol

from redis.asyncio import Redis

from trawl.redisconn.scripts import read_script

from .domain import DomainState, RateWaitTooLong
from .lateness import LATE_SHARE, MAX_MARGIN, RedisClock, too_late
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
    earlier than ``due`` (monotonic) and no later than TOKEN_MAX_AGE after it; ``due_us``: the same on
    Redis's clock, and ``margin_us`` how late after it its request may leave (:func:`before_send`). Spent
    once, though copies of the task's context (a child task) all see it."""

    __slots__ = ("due", "due_us", "margin_us", "rate", "spent", "state")

    def __init__(self, state: DomainState, rate: float, due: float, due_us: int, margin_us: int) -> None:
        self.state = state
        self.rate = rate
        self.due = due
        self.due_us = due_us
        self.margin_us = margin_us
        self.spent = False


# The current task's prepaid token, if it has one (set by .slots when its slot is leased).
PREPAID: ContextVar[Prepaid | None] = ContextVar("trawl_politeness_prepaid", default=None)


class Sending:
    """The request the current task is about to send under strict spacing: its domain, its interval (in
    seconds and in microseconds), when its token was due on Redis's clock and the margin it reserved after
    that (:mod:`.lateness`), the task's deadline, and the rate limit that granted it (asked again if the
    request leaves late: :func:`before_send`)."""

    __slots__ = ("deadline", "domain", "due_us", "interval", "interval_us", "limit", "margin_us", "state")

    def __init__(
        self,
        limit: RateLimit,
        domain: str,
        state: DomainState,
        interval: int,
        due_us: int,
        margin_us: int,
        deadline: float | None,
    ) -> None:
        self.limit = limit
        self.domain = domain
        self.state = state
        self.interval_us = interval
        self.interval = interval / 1_000_000
        self.due_us = due_us
        self.margin_us = margin_us
        self.deadline = deadline


# Set when a strictly spaced request's token is handed out, read by :func:`before_send` (the fetcher's
# request runs in the same asyncio task, so in the same context).
SENDING: ContextVar[Sending | None] = ContextVar("trawl_politeness_sending", default=None)


class Holding(Protocol):
    """What the current task's slot (:class:`~.slots.Slot`) keeps of its request: when it last left (0: not yet)."""

    sent: float


# Set while the current task holds a domain's slot, so the fetcher's send (:func:`before_send`) can note when
# its request left: a request abandoned after that still occupies its host (.slots: linger).
HOLDING: ContextVar[Holding | None] = ContextVar("trawl_politeness_holding", default=None)


class Leaving:
    """A strictly spaced request between its last check (:func:`before_send`) and the write of its headers.

    Nothing is awaited in between, but the process can still stall there: a cyclic collection of a busy
    worker's heap took 100-220 ms (bench/many_hosts.py at 1,024 places), and a request stamped as leaving
    before such a stall reached its host that much later than its stamp, so the domain's next request,
    spaced from the stamp, arrived closer than the limit (issue 37: one rate violation at the farm). So the
    collector is held off from the check to the write (``gc.disable`` only stops automatic collections; the
    one due runs at the next allocation after), and :meth:`written` stamps the request again once its
    headers are out: the next request is spaced from the later of the two, whatever else stalled."""

    __slots__ = ("collect", "interval", "state")

    def __init__(self, state: DomainState, interval: float) -> None:
        self.state = state
        self.interval = interval
        self.collect = gc.isenabled()
        if self.collect:
            gc.disable()

    def written(self) -> None:
        """The request's headers are written (or its send failed): the collector is back, and the domain's
        next request is spaced from now if that is later than the stamp."""
        if self.collect:
            gc.enable()
        self.state.left(time.monotonic(), self.interval)


async def before_send() -> Leaving | None:
    """Called by the fetcher right before the current task's request headers are written: wait until one
    interval after the domain's previous request left this worker, and, if the request is too late after its
    token's due time on Redis's clock, ask Redis again (see the module); then count this one as leaving now.
    Nothing is awaited between the last check and the write, so two requests of a domain leave in the
    order they pass here, one interval apart, however late either was. A strictly spaced request returns
    its :class:`Leaving`, whose ``written`` the fetcher calls once the headers are out."""
    pending = SENDING.get()
    if pending is None:
        mark_sent()
        return None
    SENDING.set(None)
    state, interval = pending.state, pending.interval
    first = True
    while True:
        while True:  # at most one interval: sent_at is never ahead of the clock
            gap = state.sent_at + interval - time.monotonic()
            if gap <= 0:
                break
            await asyncio.sleep(gap)  # and check again: another request of the domain may have left meanwhile
        clock = pending.limit.clock
        late = time.monotonic() - clock.local(pending.due_us)
        if first:  # how late this worker's requests leave: the margin of its next tokens
            clock.lag.seen(late)
            first = False
        late -= pending.margin_us / 1_000_000
        if not too_late(late, interval):
            break
        await pending.limit.late(pending, late)  # a new due time, waited for: checked again
    state.left(time.monotonic(), interval)
    mark_sent()
    return Leaving(state, interval)


def mark_sent() -> None:
    """Note on the current task's slot, if it holds one, that its request leaves now."""
    holding = HOLDING.get()
    if holding is not None:
        holding.sent = time.monotonic()


class RateLimit:
    """Tokens of each domain's pool-wide rate, taken one per request."""

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str, str], str],
        domains: defaultdict[str, DomainState],
        on_wait: Callable[[str, float], None] | None = None,
        parking: Parking | None = None,
        clock: RedisClock | None = None,
    ) -> None:
        self.key = key  # (domain, kind) -> redis key
        self.on_wait = on_wait
        self.on_late: Callable[[str], None] | None = None  # a request left late: the outcome (before_send)
        self.clock = clock or RedisClock()  # Redis's clock on this worker's (shared with the slots)
        self.parking = parking or Parking()  # a task waiting here gives its place to another (.parking)
        self._domains = domains  # added on first use; shared with the slots
        self._gcra = redis.register_script(read_script("trawl.worker", "rate_take"))
        self._late = redis.register_script(read_script("trawl.worker", "rate_late"))

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
                self._sending(domain, state, interval, burst, prepaid.due_us, prepaid.margin_us, deadline)
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
        self._sending(domain, state, interval, burst, state.tokens_due, state.tokens_margin, deadline)

    def _sending(
        self,
        domain: str,
        state: DomainState,
        interval: int,
        burst: int,
        due_us: int,
        margin_us: int,
        deadline: float | None,
    ) -> None:
        """Strict spacing (burst 1): the fetcher spaces the request from the domain's previous one as it
        leaves, and checks it against its token's due time (:func:`before_send`); none otherwise."""
        SENDING.set(Sending(self, domain, state, interval, due_us, margin_us, deadline) if burst == 1 else None)

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
                margin = self.clock.lag.margin_us(interval / 1_000_000) if burst == 1 else 0
                granted, wait_us, now_us = await self._gcra(
                    keys=[self.key(domain, "rate")], args=[interval, burst, token_batch(rate), reserve, margin]
                )
                self.clock.observe(int(now_us), time.monotonic())
                granted, wait = int(granted), int(wait_us) / 1_000_000
                if granted > 0 and burst == 1:  # one token: TAT is now its due time + interval + margin
                    state.granted(int(now_us) + int(wait_us), interval, margin)
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
                    state.tokens_due = int(now_us) + int(wait_us)
                    state.tokens_margin = margin
            state.tokens -= 1

    async def late(self, sending: Sending, late: float) -> None:
        """The request of ``sending`` leaves ``late`` seconds after its token's due time, too late
        (:func:`before_send`): one ``rate_late`` call, which either lets it leave now or gives it a fresh
        token, waited for here; ``sending.due_us`` is then the new due time (the request is checked against it
        again). Raises :class:`RateWaitTooLong` instead of waiting past the task's deadline."""
        deadline = sending.deadline
        reserve = RESERVE_US if deadline is None else int((deadline - time.monotonic()) * 1_000_000)
        if reserve < 0:
            raise RateWaitTooLong(sending.interval)
        # A loop this late will likely read the reply late too: the request may leave that much after Redis
        # moved the timeline (the next token waits for it), or a busy loop would ask again at every reply.
        margin = int(min(max(late, LATE_SHARE * sending.interval), sending.interval * MAX_MARGIN) * 1_000_000)
        due = sending.due_us + sending.margin_us  # the timeline's next token is due an interval after this
        granted, wait_us, now_us, due_us = await self._late(
            keys=[self.key(sending.domain, "rate")],
            args=[sending.interval_us, due, reserve, margin, sending.state.timeline_us],
        )
        read = time.monotonic()
        self.clock.observe(int(now_us), read)
        wait = int(wait_us) / 1_000_000
        if self.on_late is not None:
            self.on_late(("moved" if wait == 0 else "retaken") if int(granted) else "deferred")
        if not int(granted):
            raise RateWaitTooLong(wait)
        sending.due_us = int(due_us)
        sending.margin_us = 0  # the new due time is the latest the request may leave (rate_late's margin in it)
        sending.state.granted(sending.due_us, sending.interval_us, 0)
        if wait > 0:
            if self.on_wait is not None:
                self.on_wait(sending.domain, wait)
            await asyncio.sleep(read + wait - time.monotonic())  # from the read: never before it is due
