"""A job whose worker spec does not read (damaged, or written by an operator this worker cannot follow): its
tasks are dead-lettered with the reason, nothing is fetched for them, and the worker goes on with other jobs."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/badspec}"
ALLOWED = ["127.0.0.2/32"]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (
            {"request": {"timeout_seconds": "soon"}},
            "unreadable job spec: spec.request.timeout_seconds: expected a number, got 'soon'",
        ),
        ({"output": {"sink": "Carrier pigeon"}}, "unreadable job spec: spec.output.sink: expected one of RedisStream"),
        ({"crawl": {"max_depth": 1, "hops": 3}}, "unreadable job spec: spec.crawl: unknown field hops"),
        # a section read by its model (only jobs that render import it): the model's error, the same way
        ({"render": {"mode": "Browser", "waitFor": "Teatime"}}, "unreadable job spec: spec.render: "),
        ("{not json", "unreadable job spec: spec: not JSON (Expecting property name"),
    ],
    ids=["type", "enum", "unknown-key", "model", "not-json"],
)
async def test_unreadable_spec_dead_letters_its_tasks_with_the_reason(
    site: Bookstore, redis_client: aioredis.Redis, damage: dict[str, object] | str, reason: str
) -> None:
    queue = Queue(redis_client, PREFIX)
    fast = {"politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 16}}
    bad, good = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    bad_urls = [site.product_url(i) + "?bad" for i in (1, 2)]
    for job_id, urls in ((bad, bad_urls), (good, [site.product_url(3)])):
        job = ScrapeJobSpec.model_validate({"pool": "p", "urls": urls, **fast})
        await queue.register_job(build_job_config(job_id, job, None))
    keys = Keys(PREFIX)
    spec = json.loads(await redis_client.get(keys.spec(bad)))
    await redis_client.set(keys.spec(bad), damage if isinstance(damage, str) else json.dumps(spec | damage))
    for job_id, urls in ((bad, bad_urls), (good, [site.product_url(3)])):
        await queue.enqueue(job_id, urls)
        await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="wb-" + bad, concurrency=2, allowed_cidrs=ALLOWED),
        queue,
        redis_client,
        keys,
    )
    runner = asyncio.create_task(worker.run())
    try:

        async def both_finished() -> bool:
            return all([(await queue.job_stats(j)).finished for j in (bad, good)])

        await wait_for_async("both jobs finished", both_finished, 60, 0.05)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 60)
    stats = await queue.job_stats(bad)
    assert stats.dead == 2 and stats.succeeded == 0 and stats.retrying == 0  # dead at once: no use retrying
    letters = await queue.dead_letters(bad)
    assert sorted(d.url for d in letters) == sorted(bad_urls)
    assert all(d.error_class == "Internal" and d.message.startswith(reason) for d in letters), letters
    assert "?bad" not in site.access_log.read_text()  # nothing fetched for it
    assert (await queue.job_stats(good)).succeeded == 1  # the worker went on with the other job
