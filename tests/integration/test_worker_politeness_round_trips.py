"""The polite path's round trips to Redis per request (issue 37: at 1,000 hosts they, not waiting, bounded the
worker): a token due later is reserved in the call that learns its wait; no slot is asked of Redis while the
worker leases the domain's whole limit; slots given back are returned in one call for every domain; a slot
leased for a strictly spaced domain brings its request's token. Each with the guarantee it must keep: the
pool-wide rate (GCRA in Redis) and concurrency. On a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from trawl.redisconn.scripts import read_script
from trawl.worker.breaker import CircuitBreaker
from trawl.worker.politeness import DomainLimiter, RateWaitTooLong
from trawl.worker.politeness.rate import before_send, interval_us
from waits import wait_for_async

RATE = 2.0  # strict spacing (a burst of 1): a token per request
INTERVAL = interval_us(RATE) / 1_000_000
EARLY = 0.02  # a sleep may end this much before its due time on the loop's clock


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{test/trips}}:{kind}:{domain}"


SCRIPTS = {
    "slots_acquire": "acquire",
    "slots_return": "return",
    "slots_refresh": "refresh",
    "rate_take": "rate",
    "rate_late": "late",
    "breaker_check": "breaker",
}


def _sha(name: str) -> str:
    try:
        return hashlib.sha1(read_script("trawl.worker", name).encode()).hexdigest()
    except FileNotFoundError:  # not in this tree
        return name


def count_commands(client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The round trips the client makes from now on: a command's name, a script call by the script's
    (``acquire``, ``rate``, ``return``, ``refresh``). Loading a script the server did not know, and the call it
    failed, are not counted (a test's first call on a fresh server)."""
    scripts = {_sha(name): short for name, short in SCRIPTS.items()}
    sent: list[str] = []
    execute = client.execute_command

    async def counting(*args: Any, **options: Any) -> Any:
        reply = await execute(*args, **options)  # a NOSCRIPT error is not counted
        name = str(args[0]).upper()
        if not name.startswith("SCRIPT"):
            sent.append(scripts.get(str(args[1]), name) if name == "EVALSHA" else name)
        return reply

    monkeypatch.setattr(client, "execute_command", counting)
    return sent


async def test_a_token_due_later_takes_one_round_trip_and_is_not_early(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    sent = count_commands(redis_client, monkeypatch)
    await limiter.rate.take_token("site", RATE, adaptive=False)
    first = time.monotonic()
    await limiter.rate.take_token("site", RATE, adaptive=False)  # due one interval later: reserved
    assert time.monotonic() - first >= INTERVAL - EARLY
    assert sent == ["rate", "rate"]  # before: a third, to take the token once its wait was over


async def test_a_token_due_after_the_deadline_is_not_reserved(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    other = DomainLimiter(redis_client, _key, "w2")
    await limiter.rate.take_token("site", RATE, adaptive=False)
    tat = await redis_client.get(_key("site", "rate"))
    with pytest.raises(RateWaitTooLong):
        await limiter.rate.take_token("site", RATE, adaptive=False, deadline=time.monotonic() + INTERVAL / 4)
    assert await redis_client.get(_key("site", "rate")) == tat  # nothing taken: the next token is still due
    start = time.monotonic()
    await other.rate.take_token("site", RATE, adaptive=False)
    assert time.monotonic() - start <= INTERVAL + 0.5  # the next one, not one interval later


async def test_no_slot_is_asked_of_redis_while_the_worker_leases_the_whole_limit(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    async with limiter.slot("site", 1):
        sent = count_commands(redis_client, monkeypatch)
        with pytest.raises(RateWaitTooLong):  # waits for this worker's own slot, polling nothing
            async with limiter.slot("site", 1, deadline=time.monotonic() + 0.5):
                pass
        assert sent == []  # before: one script call per poll (a dozen in 0.5 s)
    other = DomainLimiter(redis_client, _key, "w2")  # another worker asks Redis: the limit holds
    with pytest.raises(RateWaitTooLong):
        async with limiter.slot("site", 1), other.slot("site", 1, deadline=time.monotonic() + 0.3):
            pass


async def test_slots_given_back_are_returned_together_and_taken_again_meanwhile(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    domains = ["a", "b", "c"]
    async with contextlib.AsyncExitStack() as stack:
        for domain in domains:
            await stack.enter_async_context(limiter.slot(domain, 1))
        sent = count_commands(redis_client, monkeypatch)

    async def returned() -> bool:
        return all([await redis_client.zcard(_key(d, "conc")) == 0 for d in domains])

    await wait_for_async("the slots to be returned", returned, 10, 0.005)
    assert [s for s in sent if s != "ZCARD"] == ["return"]  # before: a ZREM per slot

    async with limiter.slot("a", 1):  # leased, then given back
        pass
    sent.clear()
    async with limiter.slot("a", 1):  # taken again before its batch: no round trip
        assert sent == []
        assert await redis_client.zcard(_key("a", "conc")) == 1  # still leased, by this worker only


async def test_a_slot_leased_for_a_strictly_spaced_domain_brings_its_token(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    sent = count_commands(redis_client, monkeypatch)
    starts: list[float] = []
    both = asyncio.Event()

    async def request() -> None:
        async with limiter.hold_slot("site", RATE, 2):
            await limiter.rate.take_token("site", RATE, adaptive=False)
            starts.append(time.monotonic())
            if len(starts) == 2:
                both.set()
            await both.wait()  # the two requests hold their slots together (else the second takes the first's)

    await asyncio.wait_for(asyncio.gather(request(), request()), 10)
    assert [s for s in sent if s != "return"] == ["acquire", "acquire"]  # the tokens came with the slots
    assert abs(starts[1] - starts[0]) >= INTERVAL - EARLY  # the second token reserved one interval later


async def test_a_prepaid_token_keeps_the_pool_rate_across_workers(redis_client: aioredis.Redis) -> None:
    workers = [DomainLimiter(redis_client, _key, f"w{i}") for i in range(2)]
    starts: list[float] = []

    async def request(limiter: DomainLimiter) -> None:
        async with limiter.hold_slot("site", RATE, 4):
            await limiter.rate.take_token("site", RATE, adaptive=False)
            starts.append(time.monotonic())

    await asyncio.gather(*(request(w) for w in workers for _ in range(2)))
    starts.sort()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 4 and min(gaps) >= INTERVAL - EARLY


async def test_a_prepaid_token_is_spent_once_and_not_at_a_lower_rate(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    async with limiter.hold_slot("site", RATE, 2):
        sent = count_commands(redis_client, monkeypatch)
        # A child task sees the task's context: it spends the token, and the task must ask Redis for another.
        await asyncio.create_task(limiter.rate.take_token("site", RATE, adaptive=False))
        assert sent == []
        start = time.monotonic()
        await limiter.rate.take_token("site", RATE, adaptive=False)
        assert sent == ["rate"] and time.monotonic() - start >= INTERVAL - EARLY
    sent.clear()
    async with limiter.hold_slot("slow", RATE, 2):
        await limiter.rate.take_token("slow", RATE / 4, adaptive=False)  # e.g. robots.txt's Crawl-delay
        assert [s for s in sent if s != "return"] == [
            "acquire",
            "rate",
        ]  # taken at the lower rate: the token of the faster one is not spent


async def test_a_wait_for_the_workers_own_slot_ends_when_it_is_given_back(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    got: list[float] = []

    async def waiter() -> None:
        async with limiter.slot("site", 1):
            got.append(time.monotonic())

    async with limiter.slot("site", 1):
        sent = count_commands(redis_client, monkeypatch)
        task = asyncio.create_task(waiter())
        await wait_for_async("the waiter to park", lambda: _true(limiter.parking.count == 1), 10, 0.01)
        released = time.monotonic()
    await asyncio.wait_for(task, 10)
    assert got[0] - released < 0.5  # woken by the give-back (its wait is bounded by OWN_SLOT_WAIT, 1 s)
    assert "acquire" not in sent  # the slot passed from one request to the next here


async def _true(value: bool) -> bool:
    return value


async def test_a_domain_is_not_forgotten_while_its_last_request_spaces_the_next(redis_client: aioredis.Redis) -> None:
    """The heartbeat's refresh forgets idle domains; one forgotten right after a request that left late (here
    0.1 s after its token) lost when that request left, and the next one, on time by Redis's clock, left
    closer than the interval (bench/many_hosts.py --send-log: fast hosts' requests 0.05-0.09 s early)."""
    limiter = DomainLimiter(redis_client, _key, "w1")
    rate = 4.0  # a burst of 1: spaced as requests leave
    interval = interval_us(rate) / 1_000_000
    await limiter.rate.take_token("site", rate, adaptive=False)
    await asyncio.sleep(0.1)  # the request leaves late (a new connection, a busy loop)
    await before_send()
    first = time.monotonic()
    await limiter.refresh()  # the heartbeat's
    await limiter.rate.take_token("site", rate, adaptive=False)
    await before_send()
    assert time.monotonic() - first >= interval - EARLY


def _breaker(redis: aioredis.Redis, worker: str, **options: Any) -> CircuitBreaker:
    return CircuitBreaker(redis, lambda domain: _key(domain, "cb"), worker, **options)


def _reading(limiter: DomainLimiter, breaker: CircuitBreaker) -> DomainLimiter:
    """The limiter's slot leases read the breaker, as the worker's runner wires them."""
    limiter.slots.breaker_key = breaker.key
    limiter.slots.breaker_seen = breaker.seen
    return limiter


async def test_a_slot_lease_reads_the_breaker_so_the_check_asks_redis_nothing(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    breaker = _breaker(redis_client, "w1", refresh_seconds=1.0, monotonic=lambda: now[0])
    limiter = _reading(DomainLimiter(redis_client, _key, "w1"), breaker)
    sent = count_commands(redis_client, monkeypatch)
    for _ in range(4):  # a request per 1.2 s: each check past refresh_seconds after the previous check
        assert (await breaker.check("site")).state == "closed"
        now[0] += 0.6
        async with limiter.slots.slot("site", 2):  # a limit under 16: leased from Redis
            pass
        await limiter.slots.flush()  # returned: the next request leases again
        now[0] += 0.6
    assert sent.count("acquire") == 4
    assert sent.count("breaker") == 1  # the first check only (before: one per request)


async def test_a_breaker_opened_by_another_worker_is_seen_at_the_next_lease(redis_client: aioredis.Redis) -> None:
    mine = _breaker(redis_client, "w1", threshold=2, refresh_seconds=60.0)
    other = _breaker(redis_client, "w2", threshold=2, refresh_seconds=60.0)
    limiter = _reading(DomainLimiter(redis_client, _key, "w1"), mine)
    assert (await mine.check("site")).state == "closed"  # remembered for a minute
    for _ in range(2):
        await other.record("site", False, "Timeout: read timed out")
    assert (await mine.check("site")).state == "closed"  # its own read is still fresh
    async with limiter.slots.slot("site", 2):
        pass
    verdict = await mine.check("site")  # the lease saw it open: read again, not in a minute
    assert (verdict.state, verdict.reason) == ("open", "Timeout: read timed out")


async def test_failures_a_lease_reads_make_the_next_success_clear_them(redis_client: aioredis.Redis) -> None:
    mine = _breaker(redis_client, "w1", threshold=3, refresh_seconds=60.0)
    other = _breaker(redis_client, "w2", threshold=3, refresh_seconds=60.0)
    limiter = _reading(DomainLimiter(redis_client, _key, "w1"), mine)
    assert (await mine.check("site")).state == "closed"  # no failures on record: a success writes nothing
    await other.record("site", False, "HTTP5xx: 503")
    async with limiter.slots.slot("site", 2):  # reads the failure on record
        pass
    await mine.record("site", True)  # the site answered this worker: the count is reset for the pool
    assert not await redis_client.exists(_key("site", "cb"))
