"""A request abandoned after it left still occupies its host, so its slot lingers (issue 37: with two workers,
a job's cancellation returned the slots of its requests in flight, and the other worker's next request made a
third at a host limited to two). On a real Redis, the worker's real fetcher and a real HTTP server on loopback
that answers every request it received, as servers do, whether or not the client still waits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from sites import serve_handler
from trawl.egress.addresses import parse_networks
from trawl.worker.fetch import Fetcher
from trawl.worker.politeness import DomainLimiter
from trawl.worker.politeness.rate import before_send
from trawl.worker.politeness.slots import LINGER_MAX, LINGER_UNKNOWN, linger
from waits import wait_for_async

HOST = "127.0.0.1"
ANSWER = 0.8  # seconds the site takes to answer each request
BOUND = 30.0  # generous bound of a wait on the shared machine


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{test/linger}}:{kind}:{domain}"


@dataclass
class Site:
    url: str = ""
    in_flight: int = 0
    most: int = 0  # the most requests the site was answering at once
    arrivals: list[float] = field(default_factory=list)
    answered: int = 0


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = Site()

    async def page(request: web.Request) -> web.Response:
        s.arrivals.append(time.monotonic())
        s.in_flight += 1
        s.most = max(s.most, s.in_flight)
        try:
            await asyncio.sleep(ANSWER)
        finally:
            s.in_flight -= 1
            s.answered += 1
        return web.Response(text="<h1>ok</h1>", content_type="text/html")

    async with serve_handler(page, host=HOST) as url:
        s.url = url
        yield s


async def _fetch_in_slot(limiter: DomainLimiter, fetcher: Fetcher, url: str) -> None:
    async with limiter.slot(HOST, 1, deadline=time.monotonic() + BOUND):
        await fetcher.fetch(url)


async def test_a_request_abandoned_after_it_left_keeps_its_slot_while_the_host_answers(
    redis_client: aioredis.Redis, site: Site
) -> None:
    one, other = DomainLimiter(redis_client, _key, "w1"), DomainLimiter(redis_client, _key, "w2")
    async with Fetcher(allowed=parse_networks([f"{HOST}/32"]), before_send=before_send) as fetcher:
        await _fetch_in_slot(one, fetcher, site.url)  # the domain's answer time, learned
        assert one.slots._domains[HOST].answer >= ANSWER
        abandoned = asyncio.create_task(_fetch_in_slot(one, fetcher, site.url))
        await wait_for_async("the request to reach the site", lambda: _arrived(site, 2), BOUND, 0.005)
        abandoned.cancel()  # as a deleted job's task is, mid-request
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        await _fetch_in_slot(other, fetcher, site.url)  # the other worker's next request of the host
    assert site.most == 1, "the host answered two requests at once, with a limit of 1"
    # It left once the host had answered the abandoned one (the linger is the mean answer time less what
    # had passed), not one slot lease (30 s) later.
    assert site.arrivals[2] - site.arrivals[1] >= ANSWER - 0.1
    assert site.arrivals[2] - site.arrivals[1] < 10


async def test_a_request_cancelled_before_it_left_returns_its_slot_at_once(
    redis_client: aioredis.Redis, site: Site
) -> None:
    one, other = DomainLimiter(redis_client, _key, "w1"), DomainLimiter(redis_client, _key, "w2")
    held = asyncio.Event()

    async def waits_in_slot() -> None:
        async with one.slot(HOST, 1):
            held.set()
            await asyncio.sleep(BOUND)  # e.g. for its token: nothing sent

    task = asyncio.create_task(waits_in_slot())
    await asyncio.wait_for(held.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    start = time.monotonic()
    async with other.slot(HOST, 1, deadline=start + BOUND):
        # Returned by the next batch (5 ms) and leased at the other worker's next poll (<= 0.2 s), not
        # after a linger (2 s for a host with no answer time yet).
        assert time.monotonic() - start < LINGER_UNKNOWN - 0.5


async def test_a_lingering_slot_is_not_removed_when_the_worker_stops(redis_client: aioredis.Redis, site: Site) -> None:
    one = DomainLimiter(redis_client, _key, "w1")
    async with Fetcher(allowed=parse_networks([f"{HOST}/32"]), before_send=before_send) as fetcher:
        abandoned = asyncio.create_task(_fetch_in_slot(one, fetcher, site.url))
        await wait_for_async("the request to reach the site", lambda: _arrived(site, 1), BOUND, 0.005)
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        await one.release_all()  # the worker stops right after (its drain cancelled the task)
    score = await redis_client.zscore(_key(HOST, "conc"), "w1:0")
    seconds, micros = await redis_client.time()
    now_ms = seconds * 1000 + micros // 1000
    assert score is not None, "the abandoned request's slot was removed while the host still answered it"
    assert score - now_ms <= LINGER_UNKNOWN * 1000  # cut to its linger, not left for its whole lease
    await wait_for_async("the host's answer", lambda: _answered(site, 1), BOUND, 0.01)


def test_the_linger_is_the_mean_answer_time_left_within_bounds() -> None:
    assert linger(1.5, 0.5) == pytest.approx(1.0)
    assert linger(1.5, 2.0) == 0.0  # answered by now, on average
    assert linger(0.0, 0.5) == pytest.approx(LINGER_UNKNOWN - 0.5)  # no answer time yet
    assert linger(60.0, 1.0) == LINGER_MAX


async def _arrived(site: Site, n: int) -> bool:
    return len(site.arrivals) >= n


async def _answered(site: Site, n: int) -> bool:
    return site.answered >= n
