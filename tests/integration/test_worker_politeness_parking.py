"""A task waiting for its domain's politeness holds none of the worker's places, and takes one back before its
request; parked tasks still count against the leases a worker may hold; a task holding its place for a
session does not park (issue 37). On a real Redis; the worker's claims on a real queue."""

from __future__ import annotations

import asyncio
import time
import uuid

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.model import Task
from trawl.worker.finish import Finish
from trawl.worker.politeness import DomainLimiter
from trawl.worker.politeness.parking import HOLD_PLACE
from trawl.worker.politeness.rate import before_send, interval_us
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/parking}"


def _key(domain: str, kind: str) -> str:
    return f"trawl:{{test/parking}}:{kind}:{domain}"


async def _true(value: bool) -> bool:
    return value


async def test_a_task_waiting_for_its_token_is_parked(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    parks: list[int] = []
    limiter.parking.on_park = lambda: parks.append(limiter.parking.count)
    await limiter.rate.take_token("hard", 2.0, adaptive=False)  # the first: no wait
    assert parks == [] and limiter.parking.count == 0
    second = asyncio.create_task(limiter.rate.take_token("hard", 2.0, adaptive=False))
    await wait_for_async("the second task to park", lambda: _true(limiter.parking.count == 1), 10, 0.01)
    assert parks == [1] and not second.done()  # waits for its token, parked once (its waits share one park)
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


async def test_requests_back_from_parking_are_spaced_from_when_they_leave(redis_client: aioredis.Redis) -> None:
    """Two tasks of a domain whose waits ended while no place was free take places at once: the second is
    still spaced one interval after the first one's request left, not after its token's hand-out."""
    limiter = DomainLimiter(redis_client, _key, "w1")
    place = asyncio.Event()

    async def place_free() -> None:
        await place.wait()

    limiter.parking.place = place_free
    rate = 2.0
    await limiter.rate.take_token("spaced", rate, adaptive=False)  # the first: no wait, no request
    sent: list[float] = []

    async def request() -> None:
        await limiter.rate.take_token("spaced", rate, adaptive=False)
        await before_send()  # as the fetcher's request does right before its headers are written
        sent.append(time.monotonic())

    tasks = [asyncio.create_task(request()) for _ in range(2)]
    await wait_for_async("both waits to end", lambda: _true(limiter.parking.returning == 2), 10, 0.01)
    place.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert sent[1] - sent[0] >= interval_us(rate) / 1e6 - 0.02


async def test_a_task_holding_a_session_keeps_its_place_while_it_waits(redis_client: aioredis.Redis) -> None:
    waits: list[float] = []
    limiter = DomainLimiter(redis_client, _key, "w1", on_wait=lambda _domain, wait: waits.append(wait))
    parks: list[int] = []
    limiter.parking.on_park = lambda: parks.append(limiter.parking.count)
    await limiter.rate.take_token("sticky", 2.0, adaptive=False)
    waiting = asyncio.Event()

    async def as_session() -> None:
        HOLD_PLACE.set(True)  # as the pipeline sets it around a session's request (this task's context only)
        waiting.set()
        await limiter.rate.take_token("sticky", 2.0, adaptive=False)

    second = asyncio.create_task(as_session())
    await waiting.wait()
    await wait_for_async("the session's token wait", lambda: _true(bool(waits)), 10, 0.01)
    assert limiter.parking.count == 0 and not second.done()  # waiting, yet not parked
    await asyncio.wait_for(second, 5)
    assert parks == [] and limiter.parking.count == 0


async def test_a_task_waiting_for_a_slot_is_parked_and_back_with_it(redis_client: aioredis.Redis) -> None:
    limiter = DomainLimiter(redis_client, _key, "w1")
    place = asyncio.Event()

    async def place_free() -> None:
        await place.wait()

    limiter.parking.place = place_free
    slot = limiter.slot("busy", 1)
    async with limiter.slot("busy", 1):
        waiting = asyncio.create_task(slot.__aenter__())
        await wait_for_async("the slot's waiter to park", lambda: _true(limiter.parking.count == 1), 10, 0.01)
    await wait_for_async("the slot's wait to end", lambda: _true(limiter.parking.returning == 1), 10, 0.01)
    assert not waiting.done()  # it has the slot, and waits for a place before its request
    place.set()
    await asyncio.wait_for(waiting, 5)
    assert limiter.parking.count == 0
    await slot.__aexit__(None, None, None)


async def test_parked_tasks_free_places_but_not_leases(redis_client: aioredis.Redis) -> None:
    job = ScrapeJobSpec.model_validate({"pool": "park", "urls": [f"http://127.0.0.1/p{i}" for i in range(40)]})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config = WorkerConfig(prefix=PREFIX, worker_id="park-1", concurrency=2, sink_capacity=3, heartbeat_seconds=0.2)
    worker = Worker(config, queue, redis_client, Keys(PREFIX))
    parking = worker.limiter.parking
    gate = asyncio.Event()
    peak = {"parked": 0, "requests": 0}
    requests = 0

    async def process(task: Task) -> None:
        """As if the task waited for its domain until ``gate`` opens, then sent its request; acked without a
        record: the runner's accounting of places and leases, without a site."""
        nonlocal requests
        stay = parking.stay()
        stay.park()
        peak["parked"] = max(peak["parked"], parking.count)
        await gate.wait()
        await stay.back()
        requests += 1
        peak["requests"] = max(peak["requests"], requests)
        await asyncio.sleep(0.01)
        requests -= 1
        worker.finisher.submit(Finish(task, [], None, None))

    worker.pipeline.process = process  # type: ignore[method-assign]
    runner = asyncio.create_task(worker.run())
    leased = 0
    try:
        # Every started task parks: claimed tasks take their places, until the leases reach the bound.
        await wait_for_async("parked tasks to fill the leases", lambda: _true(worker.in_flight >= 5), 20, 0.01)
        deadline = time.monotonic() + 1.0  # claims go on while there is room: none may pass the bound
        while time.monotonic() < deadline:
            leased = max(leased, worker.in_flight)
            await asyncio.sleep(0.01)
        assert peak["parked"] > config.concurrency  # their places went to claimed tasks
        gate.set()
        while not (await queue.job_stats(job_id)).finished:
            assert not runner.done()
            leased = max(leased, worker.in_flight)
            await asyncio.sleep(0.01)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    assert leased <= config.concurrency + 3  # concurrency + sink capacity, parked tasks included
    assert peak["requests"] <= config.concurrency  # back from parking: a place each, no more
    assert (await queue.job_stats(job_id)).succeeded == 40
