"""A domain's requests are spaced from when they left the worker, not only from when Redis granted their
tokens (issue 37: a first request that left late let the next one, on time by Redis's clock, reach the
site closer than its limit). On a real Redis, the worker's real fetcher and a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from trawl.egress.addresses import parse_networks
from trawl.worker.fetch import Fetcher
from trawl.worker.politeness import DomainLimiter
from trawl.worker.politeness.rate import burst_for, interval_us, request_left

HOST = "127.0.0.1"
RATE = 2.0  # strict spacing: a burst of 1
JITTER = 0.15  # seconds an arrival may be recorded late by the server on a loaded machine


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{test/spacing}}:{kind}:{domain}"


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[float]]]:
    arrivals: list[float] = []

    async def page(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        return web.Response(text="<h1>ok</h1>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, HOST, 0).start()
    try:
        yield f"http://{HOST}:{runner.addresses[0][1]}/", arrivals
    finally:
        await runner.cleanup()


async def _two_requests(redis: aioredis.Redis, url: str, *, traced: bool, late: float) -> tuple[DomainLimiter, float]:
    """The domain's first request leaves ``late`` seconds after its token (a new connection, a busy loop),
    the second as soon as its own token allows; each in a task of its own, as the worker's tasks run."""
    limiter = DomainLimiter(redis, _key, "w1")

    def hop(delay: float) -> Callable[[str], Awaitable[None]]:
        async def before_hop(_url: str) -> None:
            await limiter.rate.take_token(HOST, RATE, adaptive=False)
            await asyncio.sleep(delay)

        return before_hop

    async with Fetcher(allowed=parse_networks([f"{HOST}/32"]), on_request_sent=request_left if traced else None) as f:
        await asyncio.create_task(f.fetch(url, before_hop=hop(late)))
        started = time.monotonic()
        await asyncio.create_task(f.fetch(url, before_hop=hop(0.0)))
    return limiter, started


async def test_a_late_request_spaces_the_next_from_when_it_left(
    redis_client: aioredis.Redis, site: tuple[str, list[float]]
) -> None:
    url, arrivals = site
    interval = interval_us(RATE) / 1e6
    await _two_requests(redis_client, url, traced=True, late=0.3)
    assert len(arrivals) == 2
    # Redis's second token was due 0.23 s after the first request left (0.53 - 0.3): the site must see them
    # one interval apart. JITTER covers the server's own lateness in recording an arrival on a loaded
    # machine and still tells the two apart (0.23 s without the spacing, 0.53 s with it).
    assert arrivals[1] - arrivals[0] >= interval - JITTER, arrivals


async def test_without_a_report_of_the_send_the_token_hand_out_counts(
    redis_client: aioredis.Redis, site: tuple[str, list[float]]
) -> None:
    """A proxied or rendered request reports nothing: the spacing falls back on when its token was handed
    out, so the second request is still one interval after the first's token at least."""
    url, arrivals = site
    limiter, _ = await _two_requests(redis_client, url, traced=False, late=0.0)
    state = limiter._domains[HOST]  # the record the spacing reads
    assert state.sent_at > 0
    assert len(arrivals) == 2 and arrivals[1] - arrivals[0] >= interval_us(RATE) / 1e6 - JITTER


async def test_high_rates_keep_redis_spacing_alone(redis_client: aioredis.Redis) -> None:
    """A batch of tokens (a burst above 1) is not spaced request by request here: the burst the rate allows
    is kept."""
    assert burst_for(1000.0) > 1
    limiter = DomainLimiter(redis_client, _key, "w1")
    for _ in range(20):
        await limiter.rate.take_token("big", 1000.0, adaptive=False)
    assert limiter._domains["big"].sent_at == 0.0  # no local spacing recorded
