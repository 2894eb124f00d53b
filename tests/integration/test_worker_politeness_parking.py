"""Waiting for a domain's politeness holds none of the worker's places, and a late request does not crowd
the next one of its domain (issue 37), on a real Redis and a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from trawl.worker.politeness import DomainLimiter
from trawl.worker.politeness.parking import HOLD_PLACE
from trawl.worker.politeness.rate import interval_us, send_trace
from waits import wait_for_async


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{test/parking}}:{kind}:{domain}"


ARRIVALS: list[float] = []


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        ARRIVALS.append(time.monotonic())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


async def test_a_task_waiting_for_its_token_is_parked(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    parks: list[int] = []
    limiter.parking.on_park = lambda: parks.append(limiter.parking.count)
    await limiter.rate.take_token("hard", 2.0, adaptive=False)  # the first: no wait
    assert parks == [] and limiter.parking.count == 0
    second = asyncio.create_task(limiter.rate.take_token("hard", 2.0, adaptive=False))
    await asyncio.sleep(0.1)
    assert limiter.parking.count == 1 and parks == [1]  # waits for its token, parked
    await asyncio.wait_for(second, 5)
    assert limiter.parking.count == 0


async def test_a_task_whose_wait_ended_stays_parked_until_a_place_is_free(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    place = asyncio.Event()

    async def place_free() -> None:  # the runner's: every place taken until the event
        await place.wait()

    limiter.parking.place = place_free
    await limiter.rate.take_token("full", 2.0, adaptive=False)
    second = asyncio.create_task(limiter.rate.take_token("full", 2.0, adaptive=False))
    await wait_for_async("the token's wait to end", lambda: _true(limiter.parking.returning == 1), 10, 0.02)
    assert limiter.parking.count == 1 and not second.done()  # holds no place until one is free: no request
    place.set()
    await asyncio.wait_for(second, 5)
    assert (limiter.parking.count, limiter.parking.returning) == (0, 0)


async def test_a_task_holding_a_session_keeps_its_place_while_it_waits(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    parks: list[int] = []
    limiter.parking.on_park = lambda: parks.append(limiter.parking.count)
    await limiter.rate.take_token("sticky", 2.0, adaptive=False)

    async def as_session() -> None:
        HOLD_PLACE.set(True)  # as the pipeline sets it around a session's request (this task's context only)
        await limiter.rate.take_token("sticky", 2.0, adaptive=False)

    second = asyncio.create_task(as_session())
    await asyncio.sleep(0.1)
    assert limiter.parking.count == 0 and not second.done()  # waiting, yet not parked
    await asyncio.wait_for(second, 5)
    assert parks == [] and limiter.parking.count == 0


async def _true(value: bool) -> bool:
    return value


async def test_a_task_waiting_for_a_slot_is_parked(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    async with limiter.slot("busy", 1):
        waiting = asyncio.create_task(limiter.slot("busy", 1).__aenter__())
        await asyncio.sleep(0.1)
        assert limiter.parking.count == 1
    await asyncio.wait_for(waiting, 5)
    assert limiter.parking.count == 0


async def test_a_late_request_spaces_the_next_from_when_it_left(redis_client: aioredis.Redis, site: str) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    rate = 4.0
    interval = interval_us(rate) / 1e6
    async with aiohttp.ClientSession(trace_configs=[send_trace()]) as http:

        async def request(late: float) -> None:
            await limiter.rate.take_token("d", rate, adaptive=False)
            await asyncio.sleep(late)  # e.g. a new connection, a busy loop: Redis's grant does not see it
            async with http.get(site) as resp:
                await resp.read()

        ARRIVALS.clear()
        await asyncio.create_task(request(0.2))
        granted = asyncio.create_task(limiter.rate.take_token("d", rate, adaptive=False))
        await asyncio.wait_for(granted, 5)
        # Redis's token was due 0.2 s earlier; the request arrived a moment after it left
        assert time.monotonic() - ARRIVALS[0] >= interval - 0.01


async def test_high_rates_are_not_spaced_one_by_one(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    started = time.monotonic()
    for _ in range(20):
        await limiter.rate.take_token("big", 1000.0, adaptive=False)
    assert time.monotonic() - started < 1.0  # a burst's tokens, not 20 intervals of local spacing
