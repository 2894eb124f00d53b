"""The autoscaler's cordon against a real redis-server: a cordoned worker claims nothing (its next claim
or heartbeat tells it) while another claims everything, and claims again once uncordoned or once the
operator's cordon set expires."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue, WorkerCordoned
from trawl.queue.keys import Keys
from trawl.queue.model import JobStats
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/cordon}"
ALLOWED = ["127.0.0.2/32"]
PAGES = 24


@pytest.fixture(scope="module")
def site_options() -> dict[str, Any]:
    return {"categories": 1, "books_per_category": PAGES, "latency": 0.05}


async def test_heartbeat_reply_says_whether_the_pod_is_cordoned(redis_client: aioredis.Redis) -> None:
    q = Queue(redis_client, PREFIX, lease_seconds=10)
    key = Keys(PREFIX).cordoned
    assert not (await q.heartbeat("pod-a@1", in_flight=0)).cordoned
    await q.set_cordoned({"pod-a"}, 30)
    assert (await q.heartbeat("pod-a@1", in_flight=0)).cordoned
    assert (await q.heartbeat("pod-a@2", in_flight=0)).cordoned  # every incarnation of the pod
    assert not (await q.heartbeat("pod-b@1", in_flight=0)).cordoned
    assert 0 < await redis_client.pttl(key) <= 30_000
    await q.set_cordoned({"pod-b"}, 30)  # replaces the set
    assert not (await q.heartbeat("pod-a@1", in_flight=0)).cordoned
    assert (await q.heartbeat("pod-b@1", in_flight=0)).cordoned
    await q.set_cordoned(set(), 30)
    assert not await redis_client.exists(key)


async def test_a_claim_by_a_cordoned_pod_leases_nothing_and_says_so(redis_client: aioredis.Redis) -> None:
    q = Queue(redis_client, PREFIX, lease_seconds=10)
    job = ScrapeJobSpec.model_validate({"pool": "p", "urls": [f"http://127.0.0.2/{i}" for i in range(4)]})
    job_id = uuid.uuid4().hex[:12]
    await q.register_job(build_job_config(job_id, job, None))
    await q.enqueue(job_id, job.seed_urls())
    held = await q.claim("pod-a@1", 1)
    assert len(held) == 1
    try:
        await q.set_cordoned({"pod-a"}, 30)
        with pytest.raises(WorkerCordoned):
            await q.claim("pod-a@1", 4)
        with pytest.raises(WorkerCordoned):
            await q.claim("pod-a@2", 4)  # every incarnation of the pod
        stats = await q.job_stats(job_id)
        assert (stats.pending, stats.in_flight) == (3, 1)  # nothing more leased; the held task stays held
        assert len(await q.claim("pod-b@1", 4)) == 3  # another pod takes the rest
        await q.set_cordoned(set(), 30)
        await q.enqueue(job_id, ["http://127.0.0.2/late"])
        assert len(await q.claim("pod-a@1", 4)) == 1  # lifted: it claims again
    finally:
        await q.cancel(job_id)
        await redis_client.delete(Keys(PREFIX).cordoned)


@contextlib.asynccontextmanager
async def _two_workers(
    redis_client: aioredis.Redis, *, heartbeat_seconds: float, lease_seconds: float
) -> AsyncIterator[tuple[Queue, Worker, Worker]]:
    """Workers of pods pod-a and pod-b, running until the block ends (the cordon set is removed then)."""
    queue = Queue(redis_client, PREFIX, lease_seconds=lease_seconds)

    def worker(pod: str) -> Worker:
        config = WorkerConfig(
            prefix=PREFIX, worker_id=f"{pod}@{uuid.uuid4().hex[:4]}", pod=pod, concurrency=2,
            allowed_cidrs=ALLOWED, heartbeat_seconds=heartbeat_seconds, drain_seconds=5, parse_processes=1,
        )  # fmt: skip
        return Worker(config, queue, redis_client, Keys(PREFIX))

    a, b = worker("pod-a"), worker("pod-b")
    runners = [asyncio.create_task(w.run()) for w in (a, b)]
    try:
        yield queue, a, b
    finally:
        for w in (a, b):
            w.request_stop()
        await asyncio.wait_for(asyncio.gather(*runners), 60)
        await redis_client.delete(Keys(PREFIX).cordoned)


@pytest.fixture
async def pod_workers(redis_client: aioredis.Redis) -> AsyncIterator[tuple[Queue, Worker, Worker]]:
    async with _two_workers(redis_client, heartbeat_seconds=0.2, lease_seconds=10) as three:
        yield three


async def _job(queue: Queue, site: Bookstore) -> str:
    job = ScrapeJobSpec.model_validate({"pool": "p", "urls": [site.product_url(i) for i in range(1, PAGES + 1)]})
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return job_id


async def _finished(queue: Queue, job_id: str) -> None:
    async def finished() -> JobStats | None:
        stats = await queue.job_stats(job_id)
        return stats if stats.finished else None

    stats = await wait_for_async("the job to finish", finished, 60, 0.05, diag=lambda: queue.job_stats(job_id))
    assert stats.succeeded == PAGES


async def test_a_cordoned_worker_claims_nothing_and_resumes_when_uncordoned(
    site: Bookstore, pod_workers: tuple[Queue, Worker, Worker]
) -> None:
    queue, a, b = pod_workers
    await queue.set_cordoned({"pod-a"}, 60)
    await wait_for_async("the condition", lambda: a.cordoned, 30, 0.02)
    assert not b.cordoned
    await _finished(queue, await _job(queue, site))
    # processed counts attempts: a fetch failed under load and retried counts twice (results are exact:
    # _finished checks every page succeeded once)
    assert a.processed == 0 and b.processed >= PAGES  # b claimed everything
    b_before = b.processed
    await queue.set_cordoned(set(), 60)  # the autoscaler lifts the cordon
    await wait_for_async("the condition", lambda: not a.cordoned, 30, 0.02)
    # b cordoned now, so the next job shows a claiming again (with both free, b may claim it whole first)
    await queue.set_cordoned({"pod-b"}, 60)
    await wait_for_async("the condition", lambda: b.cordoned, 30, 0.02)
    assert not a.cordoned
    await _finished(queue, await _job(queue, site))
    assert a.processed >= PAGES and b.processed == b_before


async def test_a_cordon_the_operator_stops_writing_expires(
    site: Bookstore, pod_workers: tuple[Queue, Worker, Worker]
) -> None:
    queue, a, b = pod_workers
    await queue.set_cordoned({"pod-a"}, 1.0)
    await wait_for_async("the condition", lambda: a.cordoned, 30, 0.02)
    await wait_for_async("the condition", lambda: not a.cordoned, 10, 0.02)  # nobody wrote it again: the set expired
    await queue.set_cordoned({"pod-b"}, 60)  # so that the job shows a claiming again (see above)
    await wait_for_async("the condition", lambda: b.cordoned, 30, 0.02)
    await _finished(queue, await _job(queue, site))
    assert a.processed >= PAGES and b.processed == 0


async def test_a_worker_stops_claiming_at_its_next_claim_not_its_next_heartbeat(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    # Heartbeats a minute apart: only the claim can tell pod-a it is cordoned before the job ends.
    async with _two_workers(redis_client, heartbeat_seconds=60, lease_seconds=120) as (queue, a, b):

        async def first_beats() -> bool:
            return all([await redis_client.hexists(Keys(PREFIX).worker_info, w.worker_id) for w in (a, b)])

        # both first heartbeats came and went: the next ones are a minute away
        await wait_for_async("the condition", first_beats, 30, 0.02)
        await queue.set_cordoned({"pod-a"}, 60)
        await _finished(queue, await _job(queue, site))
        assert a.processed == 0 and b.processed >= PAGES
        assert a.cordoned and not b.cordoned
