"""The per-domain concurrency shared by a pool's workers: a sorted set of slot leases per domain
(member -> expiry) on the pool's Redis.

A worker leases slots, reuses them locally while it has queued requests for the domain, returns them
when it has none, and never keeps one longer than ``SLOT_HOLD_SECONDS`` without giving other workers a
chance. Leases expire, so a killed worker cannot hold a domain's slots for ever.

Round trips are the polite path's cost per request at many hosts (issue 37: at 1,000 hosts each request
asked Redis for a slot about 1.5 times and returned it once, beside its rate token). So a worker asks Redis
for none while it already leases the domain's whole limit (Redis could only say no: it waits for one of its
own), and slots given back are returned in batches, every domain's in one script call
(``RETURN_SECONDS`` after the first: a slot is held that much longer, never more than its lease), a request
of the domain here meanwhile taking one back instead of leasing another. A lease also reads the domain's
circuit breaker (``breaker_key``, set by the runner) and tells it what it read (``breaker_seen``): where each
request leases its slot, that read replaces the breaker's own round trip (~0.7 per page at 1,000 hosts),
and it is newer than the breaker's read of up to a second before.

A request abandoned after it left (its task cancelled: the job deleted, the worker stopping) still occupies
its host, which answers it anyway. Its slot therefore *lingers*: the return batch cuts its lease to the time
the host likely still needs (the domain's mean answer time here less what has passed, :func:`linger`)
instead of removing it, so no request of any worker takes its place meanwhile. Returned at once, it let a
pool's other worker send a third request to a host limited to two (bench/many_hosts.py --workers 2, issue 37).
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

from trawl.redisconn.replies import text
from trawl.redisconn.scripts import read_script

from .domain import DomainState, RateWaitTooLong, running_mean
from .lateness import RedisClock
from .parking import Parking, Stay
from .rate import HOLDING, PREPAID, RESERVE_US, Prepaid, burst_for, interval_us

log = logging.getLogger("trawl.worker.politeness")

SLOT_LEASE_MS = 30_000
SLOT_HOLD_SECONDS = 2.0
LARGE_LIMIT = 16  # from this per-domain limit up, slots are leased in batches and kept while young
RETURN_SECONDS = 0.005  # slots given back are returned to Redis together, this long after the first
RETURN_BATCH = 256  # members per return call
OWN_SLOT_WAIT = 1.0  # the longest a wait for one of this worker's own slots sleeps without looking again
ANSWER_WEIGHT = 0.2  # weight of one request in the running mean of a domain's answer time
LINGER_UNKNOWN = SLOT_HOLD_SECONDS  # an abandoned request's linger at a domain with no answer time yet
LINGER_MAX = 10.0  # the longest an abandoned request's slot lingers


def linger(answer: float, elapsed: float) -> float:
    """Seconds an abandoned request's slot stays leased: its host's mean answer time (``answer``; 0: none
    known yet) less the ``elapsed`` seconds since the request left, within 0..LINGER_MAX."""
    expected = answer if answer > 0 else LINGER_UNKNOWN
    return min(LINGER_MAX, max(0.0, expected - elapsed))


def slots_wanted(waiters: int, limit: int) -> int:
    """Slots asked of Redis in one lease: one per local waiter (up to 8) for large limits, else one."""
    return max(1, min(waiters, 8 if limit >= LARGE_LIMIT else 1))


def prepays(state: DomainState, rate: float) -> bool:
    """Whether a slot's lease takes its request's token too: where the rate spaces requests strictly (a burst
    of 1: a token per request, each a round trip of its own), this worker holds none of the domain's tokens,
    and no adaptive delay comes before the token (it would age it)."""
    return 0 < rate < float("inf") and burst_for(rate) == 1 and state.tokens <= 0 and state.adaptive.delay == 0


class Slot:
    """The context manager of :meth:`ConcurrencySlots.slot`: a plain class, as it is entered once per request
    (a generator-based one costs a generator and its frames each time)."""

    __slots__ = ("deadline", "domain", "limit", "member", "rate", "sent", "slots")

    def __init__(
        self, slots: ConcurrencySlots, domain: str, limit: int, deadline: float | None, rate: float = 0.0
    ) -> None:
        self.slots = slots
        self.domain = domain
        self.limit = limit
        self.deadline = deadline
        self.rate = rate
        self.member: str | None = None
        self.sent = 0.0  # when the block's request last left (rate.before_send), 0: not yet

    async def __aenter__(self) -> None:
        self.member = await self.slots._take(self.domain, self.limit, self.deadline, self.rate)
        HOLDING.set(self)  # a task holds one slot at a time

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self.member is not None:
            member, self.member = self.member, None
            if HOLDING.get() is self:
                HOLDING.set(None)
            abandoned = exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
            await self.slots._give(self.domain, member, self.sent, abandoned=abandoned)


class ConcurrencySlots:
    """Leases of each domain's pool-wide concurrency slots, held one per request."""

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str, str], str],
        worker_id: str,
        domains: defaultdict[str, DomainState],
        parking: Parking | None = None,
        clock: RedisClock | None = None,
    ) -> None:
        self.redis = redis
        self.clock = clock or RedisClock()  # Redis's clock on this worker's: a lease's token reply sets it too
        self.parking = parking or Parking()  # a task waiting here gives its place to another (.parking)
        self.key = key  # (domain, kind) -> redis key
        self.worker_id = worker_id
        self._domains = domains  # added on first use; shared with the rate limit
        self._acquire = redis.register_script(read_script("trawl.worker", "slots_acquire"))
        self._refresh = redis.register_script(read_script("trawl.worker", "slots_refresh"))
        self._return = redis.register_script(read_script("trawl.worker", "slots_return"))
        self._serial = itertools.count()
        self._returning: set[str] = set()  # domains with slots waiting for the next return batch
        self._return_timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        # The domain's circuit breaker hash, read by each lease (None: not read), and who is told its state and
        # failure count (the runner sets both to its CircuitBreaker's ``key`` and ``seen``).
        self.breaker_key: Callable[[str], str] | None = None
        self.breaker_seen: Callable[[str, str, str], None] = lambda domain, state, fails: None

    def slot(self, domain: str, limit: int, *, deadline: float | None = None, rate: float = 0.0) -> Slot:
        """Hold one of the domain's pool-wide concurrency slots for the duration of the block
        (``async with slots.slot(...)``; given back however the block ends). With the ``rate`` of the
        block's request, a slot leased from Redis comes with that request's token where one round trip can
        take both (:func:`prepays`)."""
        return Slot(self, domain, limit, deadline, rate)

    async def _take(self, domain: str, limit: int, deadline: float | None, rate: float = 0.0) -> str:
        """A slot's member; the task is parked while it waits for one, and back in a place on return."""
        stay = self.parking.stay()
        try:
            member = await self._wait_take(domain, limit, deadline, stay, rate)
        except BaseException:
            stay.drop()
            raise
        try:
            await stay.back()
        except BaseException:
            await self._give(domain, member)
            raise
        return member

    async def _wait_take(self, domain: str, limit: int, deadline: float | None, stay: Stay, rate: float) -> str:
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
                    if (
                        state.returning
                        and time.monotonic() - state.slots_all.get(state.returning[-1], 0.0) < SLOT_HOLD_SECONDS
                    ):
                        return state.returning.pop()  # given back, not returned yet: still leased here
                    # Every slot leased here, in use: Redis could only say no, and the wait ends when one of
                    # them is given back (``slot_event``: kept for a waiter here, or returned by a batch).
                    own = len(state.slots_all) >= limit
                    if not own and await self._lease(domain, state, limit, rate, deadline):
                        return state.slots.pop()
                if deadline is not None and time.monotonic() + pause > deadline:
                    raise RateWaitTooLong(pause)
                # Slots of other workers are polled for (nothing tells this one when they are returned); a wait
                # for this worker's own is woken when one comes back, OWN_SLOT_WAIT its bound.
                wait = OWN_SLOT_WAIT if own else pause
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                state.slot_event.clear()
                stay.park()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await state.slot_event.wait()
                if not own:
                    pause = min(pause * 1.5, 0.2)
        finally:
            state.waiters -= 1

    async def _lease(self, domain: str, state: DomainState, limit: int, rate: float, deadline: float | None) -> int:
        """Lease up to :func:`slots_wanted` of the domain's slots from Redis, into ``state.slots``; how many.
        With the request's token, where :func:`prepays` (the caller's :data:`~.rate.PREPAID`)."""
        want = slots_wanted(state.waiters, limit)
        first = next(self._serial)
        for _ in range(want - 1):
            next(self._serial)
        prefix = f"{self.worker_id}:"
        keys = [self.key(domain, "conc")]
        args: list[int | str] = [limit, want, SLOT_LEASE_MS, prefix, first, "0"]
        if self.breaker_key is not None:
            keys.append(self.breaker_key(domain))
            args[5] = "1"
        token = want == 1 and prepays(state, rate)
        margin = 0
        if token:
            reserve = RESERVE_US if deadline is None else int((deadline - time.monotonic()) * 1_000_000)
            keys.append(self.key(domain, "rate"))
            margin = self.clock.lag.margin_us(interval_us(rate) / 1_000_000)
            args += [interval_us(rate), 1, reserve, margin]
        reply = await self._acquire(keys=keys, args=args)
        granted = int(reply[0])
        if granted and self.breaker_key is not None:
            self.breaker_seen(domain, text(reply[3]), text(reply[4]))
        if granted and token:
            read = time.monotonic()
            self.clock.observe(int(reply[5]), read)
            if int(reply[1]):
                due_us = int(reply[5]) + int(reply[2])
                state.granted(due_us, interval_us(rate), margin)
                PREPAID.set(Prepaid(state, rate, read + int(reply[2]) / 1_000_000, due_us, margin))
        if granted:
            now = time.monotonic()
            members = [f"{prefix}{first + i}" for i in range(granted)]
            for m in members:
                state.slots_all[m] = now
            state.slots.extend(reversed(members))  # the caller pops members[0]
            if len(members) > 1:
                state.slot_event.set()
        return granted

    async def _give(self, domain: str, member: str, sent: float = 0.0, *, abandoned: bool = False) -> None:
        state = self._domains[domain]
        if sent:
            elapsed = time.monotonic() - sent
            if abandoned:
                if (seconds := linger(state.answer, elapsed)) > 0:  # see the module
                    state.lingering.append((member, int(seconds * 1000)))
                    self._return_soon(domain)
                    return
            else:
                state.answer = running_mean(state.answer, elapsed, ANSWER_WEIGHT)
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
        state.returning.append(member)  # returned with others by the next batch (see the module)
        self._return_soon(domain)

    def _return_soon(self, domain: str) -> None:
        self._returning.add(domain)
        if self._return_timer is None:
            self._return_timer = asyncio.get_running_loop().call_later(RETURN_SECONDS, self._flush_soon)

    def _flush_soon(self) -> None:
        self._return_timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        """Return the slots given back since the last batch, every domain's in one call per RETURN_BATCH; those
        Redis does not take back are returned by the next :meth:`refresh`."""
        if self._return_timer is not None:
            self._return_timer.cancel()
            self._return_timer = None
        batch: list[tuple[str, str, int]] = []  # (domain, member, linger in ms: 0 to remove it now)
        for domain in self._returning:
            state = self._domains.get(domain)
            if state is None:
                continue
            for member in state.returning:
                state.slots_all.pop(member, None)
                batch.append((domain, member, 0))
            for member, ms in state.lingering:
                state.slots_all.pop(member, None)
                batch.append((domain, member, ms))
            state.returning.clear()
            state.lingering.clear()
        self._returning.clear()
        for i in range(0, len(batch), RETURN_BATCH):
            part = batch[i : i + RETURN_BATCH]
            args: list[str | int] = [m for _, m, _ in part]
            if any(ms for _, _, ms in part):
                args += [ms for _, _, ms in part]
            try:
                await self._return(keys=[self.key(d, "conc") for d, _, _ in part], args=args)
            except Exception as exc:
                for domain, member, ms in part:  # a lingering one's lease ends by itself: never sooner
                    if not ms:
                        self._domains[domain].unreturned.add(member)
                log.warning("could not return %d slots (retried at the next heartbeat): %s", len(part), exc)
            for domain, _, _ in part:  # a waiter here may lease one now
                state = self._domains.get(domain)
                if state is not None:
                    state.slot_event.set()

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
        with contextlib.suppress(Exception):  # the batch first: lingering slots keep their linger
            await self.flush()
        if self._return_timer is not None:
            self._return_timer.cancel()
            self._return_timer = None
        self._returning.clear()
        for domain, state in list(self._domains.items()):
            members = [*state.slots_all, *state.unreturned]
            state.returning.clear()
            if members:
                with contextlib.suppress(Exception):
                    await self.redis.zrem(self.key(domain, "conc"), *members)
                state.slots_all.clear()
                state.slots.clear()
                state.unreturned.clear()
