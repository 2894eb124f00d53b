"""Real `trawl worker` processes against a Redis that fails over (the rediscluster and redissentinel
layers): start them, submit a job straight to the queue, wait for it through the failover, and read what
they wrote. A conftest imports the ``workers`` fixture (``from failover_workers import workers``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev import procs
from trawl.dev.bookstore import PRODUCT_FIELDS
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys

HOST = "127.0.0.2"  # the fixture site's address: the workers may fetch from it and nothing else


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        procs.stop(proc, timeout=10)


def start_worker(
    started: list[subprocess.Popen[bytes]],
    redis_args: list[str],
    prefix: str,
    name: str,
    log_dir: Path,
    metrics_port: int = 0,
) -> subprocess.Popen[bytes]:
    """`trawl worker` on the job's host only, with short leases and drains; ``redis_args`` say which Redis."""
    argv = [
        sys.executable, "-m", "trawl.cli", "worker", *redis_args,
        "--prefix", prefix, "--allowed-cidrs", f"{HOST}/32", "--worker-id", name, "--lease-seconds", "6",
        "--concurrency", "8", "--drain-seconds", "5", "--parse-processes", "0",
        "--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1",
    ]  # fmt: skip
    proc = procs.start(argv, log_path=log_dir / f"{name}.log")
    started.append(proc)
    return proc


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
    deadline = time.monotonic() + limit
    while True:
        try:
            if (await queue.job_stats(job_id)).finished:
                return
        except Exception:  # the test's own client during a failover: ask again
            pass
        assert time.monotonic() < deadline, await queue.job_stats(job_id)
        await asyncio.sleep(0.2)


def duplicate_records(port: int) -> int:
    """The worker's own count of records it did not write because an earlier fetch had stored them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    name = "trawl_worker_duplicate_records_total "
    return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(name))


async def records(redis: aioredis.Redis, prefix: str, job_id: str) -> list[dict[str, Any]]:
    return [json.loads(f[b"data"]) for _id, f in await redis.xrange(Keys(prefix).results(job_id))]
