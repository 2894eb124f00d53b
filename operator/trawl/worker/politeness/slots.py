"""The per-domain concurrency shared by a pool's workers: a sorted set of slot leases per domain
(member -> expiry) on the pool's Redis.

A worker leases slots, reuses them locally while it has queued requests for the domain, returns them
when it has none, and never keeps one longer than ``SLOT_HOLD_SECONDS`` without giving other workers a
chance. Leases expire, so a killed worker cannot hold a domain's slots for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from redis.asyncio import Redis

from trawl.redisconn.scripts import read_script

from .domain import DomainState, RateWaitTooLong
from .parking import Parking, Stay

log = logging.getLogger("trawl.worker.politeness")

SLOT_LEASE_MS = 30_000
SLOT_HOLD_SECONDS = 2.0
LARGE_LIMIT = 16  # from this per-domain limit up, slots are leased in batches and kept while young


def slots_wanted(waiters: int, limit: int) -> int:
    """Slots asked of Redis in one lease: one per local waiter (up to 8) for large limits, else one."""
    return max(1, min(waiters, 8 if limit >= LARGE_LIMIT else 1))


class Slot:
    """The context manager of :meth:`ConcurrencySlots.slot`: a plain class, as it is entered once per request
    (a generator-based one costs a generator and its frames each time)."""

    __slots__ = ("deadline", "domain", "limit", "member", "slots")

    def __init__(self, slots: ConcurrencySlots, domain: str, limit: int, deadline: float | None) -> None:
        self.slots = slots
        self.domain = domain
        self.limit = limit
        self.deadline = deadline
        self.member: str | None = None

    async def __aenter__(self) -> None:
        self.member = await self.slots._take(self.domain, self.limit, self.deadline)

    async def __aexit__(self, *exc: object) -> None:
        if self.member is not None:
            member, self.member = self.member, None
            await self.slots._give(self.domain, member)


class ConcurrencySlots:
    """Leases of each domain's pool-wide concurrency slots, held one per request."""

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str, str], str],
        worker_id: str,
        domains: defaultdict[str, DomainState],
        parking: Parking | None = None,
    ) -> None:
        self.redis = redis
        self.parking = parking or Parking()  # a task waiting here gives its place to another (.parking)
        self.key = key  # (domain, kind) -> redis key
        self.worker_id = worker_id
        self._domains = domains  # added on first use; shared with the rate limit
        self._acquire = redis.register_script(read_script("trawl.worker", "slots_acquire"))
        self._refresh = redis.register_script(read_script("trawl.worker", "slots_refresh"))
        self._serial = itertools.count()

    def slot(self, domain: str, limit: int, *, deadline: float | None = None) -> Slot:
        """Hold one of the domain's pool-wide concurrency slots for the duration of the block
        (``async with slots.slot(...)``; given back however the block ends)."""
        return Slot(self, domain, limit, deadline)

    async def _take(self, domain: str, limit: int, deadline: float | None) -> str:
        """A slot's member; the task is parked while it waits for one, and back in a place on return."""
        stay = self.parking.stay()
        try:
            member = await self._wait_take(domain, limit, deadline, stay)
        except BaseException:
            stay.drop()
            raise
        try:
            await stay.back()
        except BaseException:
            await self._give(domain, member)
            raise
        return member

    async def _wait_take(self, domain: str, limit: int, deadline: float | None, stay: Stay) -> str:
        state = self._domains[domain]
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
                    want = slots_wanted(state.waiters, limit)
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
                stay.park()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await state.slot_event.wait()
                pause = min(pause * 1.5, 0.2)
        finally:
            state.waiters -= 1

    async def _give(self, domain: str, member: str) -> None:
        state = self._domains[domain]
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

    async def refresh(self, domain: str, state: DomainState, now: float) -> bool:
        """Return the domain's idle slots that are old (and those Redis did not take back before), extend the
        other leases; whether this worker still leases any of the domain's slots."""
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
        if not state.slots_all:
            return False
        await self._refresh(keys=[self.key(domain, "conc")], args=[SLOT_LEASE_MS, *state.slots_all])
        return True

    async def release_all(self) -> None:
        for domain, state in list(self._domains.items()):
            members = [*state.slots_all, *state.unreturned]
            if members:
                with contextlib.suppress(Exception):
                    await self.redis.zrem(self.key(domain, "conc"), *members)
                state.slots_all.clear()
                state.slots.clear()
                state.unreturned.clear()
