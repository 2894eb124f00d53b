"""Real `trawl worker` processes against a Redis that fails over (the rediscluster and redissentinel
layers): how they are started (worker_procs.start_worker with WORKER_OPTIONS, into the ``workers`` fixture
of tests/conftest.py), a job submitted straight to the queue, waited for through the failover, and what
they wrote."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import PRODUCT_FIELDS
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from waits import wait_for_async

HOST = "127.0.0.2"  # the fixture site's address: the workers may fetch from it and nothing else
# How these layers run `trawl worker` (worker_procs.start_worker's options): on the site's host only, leases
# as short as submit's queue gives, no parser processes.
WORKER_OPTIONS: dict[str, Any] = {"allowed": f"{HOST}/32", "lease": 6, "parse_processes": 0}
WORKER_CONCURRENCY = 8  # start_worker's default: the most records one worker has in flight at the kill


def reported_within(reported: int, duplicate_fetches: int, workers: int) -> bool:
    """Whether the workers' duplicate count is explained by what the failover did. Each second fetch may be
    reported; so may a record whose write reached the old master but whose reply was lost: the client
    retries it on the promoted node, which has it already. That is at most what each worker had in flight."""
    return 0 <= reported <= duplicate_fetches + workers * WORKER_CONCURRENCY


async def submit(redis: aioredis.Redis, prefix: str, urls: list[str]) -> tuple[str, Queue]:
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": urls,
            "extract": {"fields": PRODUCT_FIELDS},
            "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 16},
        }
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, prefix, lease_seconds=6)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls(), start_index=0)
    await queue.mark_enqueue_done(job_id)
    return job_id, queue


async def wait_finished(queue: Queue, job_id: str, limit: float) -> None:
    async def finished() -> bool:
        return (await queue.job_stats(job_id)).finished

    # Errors are the test's own client during a failover: ask again.
    await wait_for_async(
        f"job {job_id} to finish", finished, limit, 0.2, diag=lambda: queue.job_stats(job_id), retry_on=(Exception,)
    )


def duplicate_records(port: int) -> int:
    """The worker's own count of records it did not write because an earlier fetch had stored them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    name = "trawl_worker_duplicate_records_total "
    return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(name))


async def records(redis: aioredis.Redis, prefix: str, job_id: str) -> list[dict[str, Any]]:
    return [json.loads(f[b"data"]) for _id, f in await redis.xrange(Keys(prefix).results(job_id))]
