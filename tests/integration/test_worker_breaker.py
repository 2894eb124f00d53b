"""The per-domain circuit breaker: opens, half-opens (one probe), closes; other domains run unaffected."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.notes import JobNotes
from trawl.worker.breaker import CircuitBreaker
from trawl.worker.runner import Worker, WorkerConfig

PREFIX = "trawl:{test/breaker}"
ALLOWED = ["127.0.0.2/32"]


async def test_opens_half_opens_with_one_probe_and_closes(redis_client: aioredis.Redis) -> None:
    now = [1000.0]
    key = f"{PREFIX}:rl:cb:" + uuid.uuid4().hex[:8]

    def breaker(worker: str) -> CircuitBreaker:
        return CircuitBreaker(
            redis_client, lambda d: key, worker, threshold=3, open_seconds=10, refresh_seconds=0, clock=lambda: now[0]
        )

    a, b = breaker("a"), breaker("b")
    assert (await a.check("site")).state == "closed"
    for _ in range(2):
        assert await a.record("site", False, "HTTP5xx: 503") == "closed"
    assert await a.record("site", True) == "closed"  # a success resets the count
    for _ in range(2):
        await b.record("site", False, "HTTP5xx: 503")
    assert (await b.check("site")).state == "closed"
    assert await b.record("site", False, "Timeout: read timed out") == "open"

    verdict = await a.check("site")  # shared by the pool: the other worker sees it open
    assert (verdict.state, verdict.until, verdict.reason) == ("open", 1010.0, "Timeout: read timed out")
    now[0] = 1010.5
    assert (await a.check("site")).state == "probe"  # half-open: this request is the probe
    assert (await b.check("site")).state == "open"  # and only it
    assert await a.record("site", False, "HTTP5xx: 503") == "open"  # the probe failed: open for twice as long
    assert (await b.check("site")).until == 1030.5
    now[0] = 1031.0
    assert (await b.check("site")).state == "probe"
    assert await b.record("site", True) == "closed"
    assert (await a.check("site")).state == "closed"
    assert not await redis_client.exists(key)


async def test_a_threshold_of_zero_turns_the_breaker_off(redis_client: aioredis.Redis) -> None:
    key = f"{PREFIX}:rl:cb:" + uuid.uuid4().hex[:8]
    off = CircuitBreaker(redis_client, lambda d: key, "w", threshold=0, open_seconds=10, refresh_seconds=0)
    for _ in range(50):
        assert await off.record("site", False, "HTTP5xx: 503") == "closed"
        assert (await off.check("site")).state == "closed"
    assert not await redis_client.exists(key)  # nothing recorded: other workers see a closed breaker too


async def _job(redis: aioredis.Redis, queue: Queue, urls: list[str]) -> str:
    retry = {"maxAttempts": 5, "initialDelaySeconds": 0.2, "maxDelaySeconds": 0.5, "honorRetryAfter": False}
    job = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": urls, "retry": retry, "politeness": {"requestsPerSecond": 1000, "adaptiveDelay": False}}
    )
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return job_id


async def test_a_failing_domain_is_paused_and_recovers_while_another_runs_unaffected(
    redis_client: aioredis.Redis,
) -> None:
    with (
        Bookstore(host="127.0.0.2", categories=1, books_per_category=12) as healthy,
        Bookstore(host="127.0.0.2", categories=1, books_per_category=1) as failing,
    ):
        queue = Queue(redis_client, PREFIX, lease_seconds=10)
        # The failing site answers 503 to its first 4 requests (all URLs share one counter), then recovers.
        bad_urls = [f"{failing.url}/hostile/503?id=shared&fail=4&n={i}" for i in range(10)]
        bad = await _job(redis_client, queue, bad_urls)
        good = await _job(redis_client, queue, [healthy.product_url(i) for i in range(1, 13)])
        worker = Worker(
            WorkerConfig(
                prefix=PREFIX, worker_id="w-" + bad, concurrency=2, allowed_cidrs=ALLOWED,
                breaker_failures=3, breaker_open_seconds=1.0,
            ),
            queue,
            redis_client,
            Keys(PREFIX),
        )  # fmt: skip
        notes = JobNotes(redis_client, Keys(PREFIX).job)
        failing_domain = failing.url.removeprefix("http://")
        seen_open: list[Any] = []
        runner = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 120
            while not ((await queue.job_stats(bad)).finished and (await queue.job_stats(good)).finished):
                assert time.monotonic() < deadline and not runner.done()
                if not seen_open:
                    seen_open = await notes.throttled_domains(bad)
                await asyncio.sleep(0.05)
        finally:
            worker.request_stop()
            await asyncio.wait_for(runner, 30)
        bad_hits = [e for e in failing.entries() if e.path.startswith("/hostile/503")]
        good_hits = [e for e in healthy.entries() if e.path.startswith("/product/")]

    # Opened after 3 failures, with the reason on the job's notes (the operator shows them as status).
    assert seen_open and seen_open[0].domain == failing_domain and "HTTP5xx" in seen_open[0].reason
    # Half-open probes: the 4th failure was a probe that re-opened it, the 5th request closed it.
    statuses = [e.status for e in bad_hits]
    assert statuses[:4] == [503] * 4 and all(s == 200 for s in statuses[4:])
    bad_stats = await queue.job_stats(bad)
    assert (bad_stats.succeeded, bad_stats.dead) == (10, 0)
    assert len(bad_hits) == 4 + 10
    # The paused tasks waited without spending attempts: only the 4 that failed were retried.
    entries = await redis_client.xrange(Keys(PREFIX).results(bad))
    attempts = sorted(json.loads(f[b"data"])["attempt"] for _id, f in entries)
    assert len(attempts) == 10 and sum(a > 1 for a in attempts) <= 4 and attempts[0] == 1
    assert worker.metrics.deferrals.labels("circuit_open")._value.get() > 0
    # The healthy domain ran at full speed meanwhile: every page fetched once, no task held back.
    assert (await queue.job_stats(good)).succeeded == 12 and len(good_hits) == 12
    assert not await redis_client.exists(Keys(PREFIX).rate_limit(healthy.url.removeprefix("http://"), "cb"))
    assert not await redis_client.exists(Keys(PREFIX).rate_limit(failing_domain, "cb"))  # closed again
