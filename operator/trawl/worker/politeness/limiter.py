"""Pool-wide per-domain rate and concurrency, plus this worker's adaptive delay, over one record per domain.

:class:`DomainLimiter` owns the records (:class:`~.domain.DomainState`) and the two halves that use them:
``rate`` (:class:`~.rate.RateLimit`) and ``slots`` (:class:`~.slots.ConcurrencySlots`). A task's requests
call those halves directly; the heartbeat loop refreshes the slot leases and forgets idle domains here.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from redis.asyncio import Redis

from .adaptive import AdaptiveDelay
from .backlog import HOLD_WEIGHT, keeps, start_wait
from .domain import DomainState, RateWaitTooLong, running_mean
from .lateness import RedisClock
from .parking import Parking
from .rate import RateLimit, interval_us
from .slots import ConcurrencySlots, Slot


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
        self._domains: defaultdict[str, DomainState] = defaultdict(DomainState)
        # Tasks waiting for their domain here, which hold none of the worker's places (.parking; the runner
        # sets ``parking.on_park`` and ``parking.place``).
        self.parking = Parking()
        clock = RedisClock()  # both halves read Redis's clock in their replies (.lateness)
        self.rate = RateLimit(redis, key, self._domains, on_wait, self.parking, clock)
        self.crowded: Callable[[], bool] = lambda: True  # whether the worker's places are all wanted (runner)
        self.slots = ConcurrencySlots(redis, key, worker_id, self._domains, self.parking, clock)

    def adaptive(self, domain: str) -> AdaptiveDelay:
        return self._domains[domain].adaptive

    def hold_slot(self, domain: str, rate: float, concurrency: int, *, deadline: float | None = None) -> HeldSlot:
        """:meth:`hold` and then :meth:`slot`, for the duration of the block."""
        held = self.hold(domain, rate, concurrency)
        return HeldSlot(held, self.slots.slot(domain, concurrency, deadline=deadline, rate=rate))

    def hold(self, domain: str, rate: float, concurrency: int) -> Held:
        """Count a task of the domain as held by this worker for the duration of the block (its slot, token
        and fetch inside); raises :class:`RateWaitTooLong` (the delay to give it back for) instead when the
        tasks of the domain already held here keep it busy long enough (:mod:`.backlog`)."""
        return Held(self, self._domains[domain], rate, concurrency)

    def deferral(self, domain: str, rate: float, concurrency: int) -> float | None:
        """The delay to give a task of the domain back for, when it should not wait here (:mod:`.backlog`);
        None when it should: always while the worker is not crowded (``crowded``, set by its runner: no
        task waits for one of its places), as waiting then holds no place another task could use."""
        if not self.crowded():
            return None
        return deferral(self._domains[domain], rate, concurrency, time.monotonic())

    def slot(self, domain: str, limit: int, *, deadline: float | None = None) -> Slot:
        """Hold one of the domain's pool-wide concurrency slots for the duration of the block (see
        :meth:`ConcurrencySlots.slot`)."""
        return self.slots.slot(domain, limit, deadline=deadline)

    async def refresh(self) -> None:
        """Return idle slots that are old, extend the other leases (called from the heartbeat loop), and
        forget the domains this worker keeps nothing of."""
        await self.slots.flush()  # slots given back and not returned yet: returned first
        now = time.monotonic()
        for domain, state in list(self._domains.items()):
            if not await self.slots.refresh(domain, state, now) and state.idle():
                self._domains.pop(domain, None)

    async def release_all(self) -> None:
        await self.slots.release_all()


def deferral(state: DomainState, rate: float, concurrency: int, now: float) -> float | None:
    """The delay to give a new task of the domain back for, or None when it should wait here (it should
    start within PARK_SECONDS: :mod:`.backlog`)."""
    interval = interval_us(rate) / 1e6 if 0 < rate < float("inf") else 0.0
    since = now - state.tokens_at if state.tokens_rate > 0 and now - state.tokens_at < interval else None
    held = state.backlog.held
    wait = start_wait(held, state.token_waiters, concurrency, interval, since, state.hold)
    first = held == concurrency if held >= concurrency else state.token_waiters == 0
    return None if keeps(wait, first) else state.backlog.defer(wait, interval, now)


class Held:
    """The context manager of :meth:`DomainLimiter.hold` (a plain class: entered once per request; async, to
    sit in one ``async with`` beside the slot)."""

    __slots__ = ("concurrency", "limiter", "rate", "state")

    def __init__(self, limiter: DomainLimiter, state: DomainState, rate: float, concurrency: int) -> None:
        self.limiter = limiter
        self.state = state
        self.rate = rate
        self.concurrency = concurrency

    async def __aenter__(self) -> None:
        if self.limiter.crowded():
            delay = deferral(self.state, self.rate, self.concurrency, time.monotonic())
            if delay is not None:
                raise RateWaitTooLong(delay)
        self.state.backlog.held += 1

    async def __aexit__(self, *exc: object) -> None:
        self.state.backlog.held -= 1


class HeldSlot:
    """The context manager of :meth:`DomainLimiter.hold_slot`."""

    __slots__ = ("held", "since", "slot")

    def __init__(self, held: Held, slot: Slot) -> None:
        self.held = held
        self.slot = slot
        self.since = 0.0

    async def __aenter__(self) -> None:
        await self.held.__aenter__()
        try:
            await self.slot.__aenter__()
        except BaseException:
            await self.held.__aexit__()
            raise
        self.since = time.monotonic()

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        state = self.held.state
        seconds = time.monotonic() - self.since  # the slot's hold: its token wait and the request
        state.hold = running_mean(state.hold, seconds, HOLD_WEIGHT)
        try:
            await self.slot.__aexit__(exc_type, *exc)
        finally:
            await self.held.__aexit__(exc_type, *exc)
