"""The finisher against a real Redis: one lane per sink, so a slow sink holds back only its own jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import redis.asyncio as aioredis

from trawl.queue import Queue
from trawl.queue.model import JobConfig
from trawl.sinks.base import Record, record_key
from trawl.worker import finish
from trawl.worker.finish import Finish, Finisher
from trawl.worker.metrics import WorkerMetrics
from waits import wait_for_async

PREFIX = "trawl:{test/finish}"


class GatedSink:
    """A sink whose writes wait until the test opens the gate (a webhook that hangs)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.written: list[Record] = []

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        await self.gate.wait()
        self.written.extend(records)
        return len(records)

    async def close(self) -> None:
        pass


def _record(job: str, url: str) -> Record:
    return Record(job, url, {"key": record_key(job, url), "job": job, "url": url})


async def test_a_slow_sink_does_not_hold_back_other_jobs(redis_client: aioredis.Redis) -> None:
    q = Queue(redis_client, PREFIX, lease_seconds=30)
    for job in ("slow", "fast"):
        await q.register_job(JobConfig(job))
        await q.enqueue(job, [f"https://{job}.test/{i}" for i in range(6)])
        await q.mark_enqueue_done(job)
    tasks = await q.claim("w", 12)
    assert len(tasks) == 12
    slow, fast = GatedSink(), GatedSink()
    fast.gate.set()
    finished: list[int] = []
    batch_done = asyncio.Event()

    def on_finished(n: int) -> None:
        finished.append(n)
        batch_done.set()

    finisher = Finisher(q, "w", WorkerMetrics(), on_finished=on_finished)
    finisher.start()
    sinks = {"slow": slow, "fast": fast}
    for t in tasks:
        finisher.submit(Finish(t, [], _record(t.job_id, t.url), sinks[t.job_id]))

    await asyncio.wait_for(batch_done.wait(), timeout=5)  # the fast lane's batch, acked
    assert (await q.job_stats("fast")).succeeded == 6
    # The fast job is acked while every task of the slow one is still held (leased, not lost).
    slow_stats = await q.job_stats("slow")
    assert (slow_stats.succeeded, slow_stats.in_flight) == (0, 6)
    assert finisher.count == 6
    assert len(fast.written) == 6 and not slow.written

    slow.gate.set()
    await asyncio.wait_for(finisher.close(), timeout=5)
    assert (await q.job_stats("slow")).succeeded == 6
    assert finisher.count == 0 and sum(finished) == 12
    assert {r.url for r in slow.written} == {t.url for t in tasks if t.job_id == "slow"}


async def test_the_links_a_worker_remembers_are_bounded_across_jobs(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: a worker that serves job after job (or one crawl of millions of pages) keeps at most
    SUBMITTED_CAP links in all, not per job: a finished job's links do not stay behind for ever."""
    monkeypatch.setattr(finish, "SUBMITTED_CAP", 50)
    await redis_client.flushall()
    q = Queue(redis_client, PREFIX, lease_seconds=30)
    finisher = Finisher(q, "w", WorkerMetrics())
    finisher.start()
    for n in range(6):
        job = f"crawl-{n}"
        await q.register_job(JobConfig(job, max_pages=1000, max_depth=3))
        await q.enqueue(job, [f"https://{job}.test/"])
        [task] = await q.claim("w", 1)
        finisher.submit(Finish(task, [f"https://{job}.test/p/{i}" for i in range(20)], None, None))
        await wait_for_async("the links and the ack", lambda: finisher.count == 0, 30, 0.02)
        assert (await q.job_stats(job)).total == 21, f"every link of {job} enqueued"
        await q.cancel(job)  # the job ends; the next one's task is the only one to claim
        assert sum(len(finisher.submitted(f"crawl-{m}")) for m in range(n + 1)) <= 50 + 20
    await asyncio.wait_for(finisher.close(), timeout=10)
