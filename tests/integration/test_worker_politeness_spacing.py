"""A domain's requests are spaced from when they left the worker, not only from when Redis granted their
tokens (issue 37: a first request that left late let the next one, on time by Redis's clock, reach the
site closer than its limit). On a real Redis, the worker's real fetcher and a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from sites import serve_handler
from trawl.egress.addresses import parse_networks
from trawl.worker.fetch import BeforeSend, Fetcher, Leaving
from trawl.worker.politeness import DomainLimiter
from trawl.worker.politeness.rate import SENDING, before_send, burst_for, interval_us

HOST = "127.0.0.1"
RATE = 2.0  # strict spacing: a burst of 1
JITTER = 0.15  # seconds an arrival may be recorded late by the server on a loaded machine


def _stall(seconds: float) -> None:
    """Block the calling event loop for ``seconds``, as a cyclic collection does."""
    time.sleep(seconds)


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{test/spacing}}:{kind}:{domain}"


@pytest.fixture
def collecting() -> Iterator[None]:
    """The cyclic collector on, as in a running worker (another test of the session may have turned it off:
    trawl.cli does while a worker imports), and back as it was after."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[float]]]:
    arrivals: list[float] = []

    async def page(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        return web.Response(text="<h1>ok</h1>", content_type="text/html")

    async with serve_handler(page, host=HOST) as url:
        yield url, arrivals


async def _two_requests(
    redis: aioredis.Redis,
    url: str,
    *,
    first_late: float,
    together: bool = False,
    send_hook: BeforeSend = before_send,
) -> None:
    """Two requests of one domain, each in a task of its own as the worker's tasks run: the first leaves
    ``first_late`` seconds after its token (a new connection, a busy loop). ``together``: the second starts
    at once, so its token comes while the first has not left yet; else once the first is done."""
    limiter = DomainLimiter(redis, _key, "w1")

    def hop(delay: float) -> Callable[[str], Awaitable[None]]:
        async def before_hop(_url: str) -> None:
            await limiter.rate.take_token(HOST, RATE, adaptive=False)
            await asyncio.sleep(delay)

        return before_hop

    async with Fetcher(allowed=parse_networks([f"{HOST}/32"]), before_send=send_hook) as f:
        first = asyncio.create_task(f.fetch(url, before_hop=hop(first_late)))
        if together:
            await asyncio.sleep(0.05)  # the first has its token
        else:
            await first
        await asyncio.gather(first, asyncio.create_task(f.fetch(url, before_hop=hop(0.0))))


async def test_a_late_request_spaces_the_next_from_when_it_left(
    redis_client: aioredis.Redis, site: tuple[str, list[float]]
) -> None:
    url, arrivals = site
    await _two_requests(redis_client, url, first_late=0.3)
    assert len(arrivals) == 2
    # Redis's second token was due 0.23 s after the first request left (0.53 - 0.3): the site must see them
    # one interval apart. JITTER covers the server's own lateness in recording an arrival on a loaded
    # machine and still tells the two apart (0.23 s without the spacing, 0.53 s with it).
    assert arrivals[1] - arrivals[0] >= interval_us(RATE) / 1e6 - JITTER, arrivals


async def test_a_request_still_connecting_does_not_leave_right_behind_the_next(
    redis_client: aioredis.Redis, site: tuple[str, list[float]]
) -> None:
    """The first request is held up past the second's token (0.8 s, an interval is 0.53 s): the second
    leaves first, and the first then waits one interval after it rather than following 0.27 s later."""
    url, arrivals = site
    await _two_requests(redis_client, url, first_late=0.8, together=True)
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= interval_us(RATE) / 1e6 - JITTER, arrivals


async def test_a_stall_after_the_check_spaces_the_next_request_from_the_write(
    redis_client: aioredis.Redis, site: tuple[str, list[float]], collecting: None
) -> None:
    """The process stalls 0.3 s between the spacing's last check and the write of the headers (a cyclic
    collection of a busy worker took up to 220 ms there): the domain's next request is spaced from when the
    first was written, not from its stamp before the stall (0.23 s after its arrival before the fix)."""
    url, arrivals = site
    enabled: list[bool] = []

    async def stalled() -> Leaving | None:
        leaving = await before_send()
        enabled.append(gc.isenabled())
        if len(enabled) == 1:  # the first request only: the second's own stall would space it anyway
            _stall(0.3)
        return leaving

    await _two_requests(redis_client, url, first_late=0.0, send_hook=stalled)
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= interval_us(RATE) / 1e6 - JITTER, arrivals
    # No automatic collection runs from the check to the write; it is back once the headers are out.
    assert enabled == [False, False] and gc.isenabled()


async def test_a_request_not_strictly_spaced_leaves_the_collector_alone(
    site: tuple[str, list[float]], collecting: None
) -> None:
    url, arrivals = site
    seen: list[tuple[bool, bool]] = []

    async def noted() -> Leaving | None:
        leaving = await before_send()
        seen.append((leaving is None, gc.isenabled()))
        return leaving

    async with Fetcher(allowed=parse_networks([f"{HOST}/32"]), before_send=noted) as f:
        await f.fetch(url)  # no token taken: nothing to space
    assert seen == [(True, True)] and len(arrivals) == 1


async def test_only_strict_spacing_is_spaced_as_it_leaves(redis_client: aioredis.Redis) -> None:
    """A rate under 40/s hands its request to the fetcher's spacing; a faster one takes tokens in batches
    (the burst its rate allows) and is spaced by Redis's grants alone."""
    assert burst_for(2.0) == 1 and burst_for(1000.0) > 1
    limiter = DomainLimiter(redis_client, _key, "w1")
    await limiter.rate.take_token("slow", 2.0, adaptive=False)
    pending = SENDING.get()
    assert pending is not None and pending.interval == pytest.approx(interval_us(2.0) / 1e6)
    await limiter.rate.take_token("big", 1000.0, adaptive=False)
    assert SENDING.get() is None
