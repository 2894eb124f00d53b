"""A worker's per-domain backlog on a real Redis (issue 37): a rate-limited or busy domain's extra tasks are
given back at once, spread over the domain's rate, instead of holding the worker's places while they wait;
another domain is not held back."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from trawl.worker.politeness import DomainLimiter, RateWaitTooLong
from trawl.worker.politeness.backlog import PARK_SECONDS
from trawl.worker.politeness.rate import interval_us


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{test/backlog}}:{kind}:{domain}"


async def test_a_busy_domains_next_task_is_given_back_and_another_domain_goes_on(
    redis_client: aioredis.Redis,
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    async with limiter.hold_slot("slow", 2.0, 1):  # its one slot, held by a long fetch
        async with limiter.hold("slow", 2.0, 1):  # one task waits on deck (how long a fetch takes: not known)
            with pytest.raises(RateWaitTooLong) as first:
                async with limiter.hold("slow", 2.0, 1):
                    pass
            with pytest.raises(RateWaitTooLong) as second:
                async with limiter.hold("slow", 2.0, 1):
                    pass
        assert first.value.wait >= 0.25
        assert second.value.wait > first.value.wait  # spread: not all back at once
        async with limiter.hold_slot("fast", 2.0, 1):  # no head-of-line blocking
            await limiter.rate.take_token("fast", 2.0, adaptive=False)
    async with limiter.hold("slow", 2.0, 1):  # the slot is free again: kept
        pass


async def test_a_slow_sites_next_task_is_given_back_once_its_fetch_time_is_known(
    redis_client: aioredis.Redis,
) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    async with limiter.hold_slot("slow", 2.0, 1):
        await asyncio.sleep(1.2)  # a slow request: its slot held 1.2 s
    async with limiter.hold_slot("slow", 2.0, 1):
        assert limiter.deferral("slow", 2.0, 1) is not None  # ~1.2 s away: given back, even on deck


async def test_a_task_due_after_the_next_token_is_given_back_until_then(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    rate = 0.5  # one request per ~2.1 s (the GCRA's spacing)
    async with limiter.hold("hard", rate, 1):
        await limiter.rate.take_token("hard", rate, adaptive=False)
    taken = time.monotonic()
    first = limiter.deferral("hard", rate, 1)  # its token is ~2 s away: not worth a place here
    delay = limiter.deferral("hard", rate, 1)
    assert first is not None and delay is not None
    interval = interval_us(rate) / 1e6
    assert delay == pytest.approx(2 * interval - (time.monotonic() - taken), abs=0.2)  # behind the first one
    assert limiter.deferral("other", rate, 1) is None


async def test_a_domain_at_its_rate_keeps_one_task_on_deck(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    await limiter.rate.take_token("fast", 2.0, adaptive=False)
    assert limiter.deferral("fast", 2.0, 2) is None  # its next token within a second: it waits here


async def test_a_high_rate_domain_keeps_its_tasks(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    for _ in range(5):
        await limiter.rate.take_token("big", 1000.0, adaptive=False)
    assert limiter.deferral("big", 1000.0, 100) is None
    assert PARK_SECONDS < 1.0


async def test_a_worker_with_free_places_keeps_its_tasks_waiting(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    limiter.crowded = lambda: False  # no task waits for one of its places: waiting holds none others want
    async with limiter.hold_slot("slow", 2.0, 1):
        assert limiter.deferral("slow", 2.0, 1) is None
        async with limiter.hold("slow", 2.0, 1):  # kept: it will wait for the slot, as before issue 37
            pass
