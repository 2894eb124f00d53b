"""Liveness: /livez fails while the event loop is stuck (though /metrics still answers); recycling."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/live}"
ALLOWED = ["127.0.0.2/32"]


@pytest.fixture(scope="module")
def site_options() -> dict[str, Any]:
    return {"categories": 1, "books_per_category": 12}


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


async def test_livez_fails_while_the_event_loop_is_stuck(redis_client: aioredis.Redis) -> None:
    port = procs.free_port("127.0.0.1")
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    worker = Worker(
        WorkerConfig(
            prefix=PREFIX, worker_id="live-" + uuid.uuid4().hex[:6], metrics_port=port,
            metrics_address="127.0.0.1", loop_stall_seconds=1.0, heartbeat_seconds=0.2,
        ),
        queue,
        redis_client,
        Keys(PREFIX),
    )  # fmt: skip
    runner = asyncio.create_task(worker.run())
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_for_async("the condition", lambda: worker.metrics.__dict__.get("_server") is not None, 30, 0.05)
        assert await asyncio.to_thread(_get, base + "/livez") == (200, "ok\n")
        seen: dict[str, tuple[int, str]] = {}

        def probe() -> None:  # from another thread, while the event loop is blocked below
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                seen["livez"] = _get(base + "/livez")
                if seen["livez"][0] != 200:
                    break
                time.sleep(0.1)
            seen["metrics"] = _get(base + "/metrics")

        prober = threading.Thread(target=probe)
        prober.start()
        # A stuck event loop (a parse, a busy loop, a blocking call): blocked here until the probe is done.
        prober.join(60)
        status, body = seen["livez"]
        assert status == 503 and "event loop has not run" in body
        assert seen["metrics"][0] == 200  # what the readiness probe sees is no proof of life
        # alive again once the loop runs
        await wait_for_async("the condition", lambda: _get(base + "/livez")[0] == 200, 30, 0.05)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)


async def test_the_worker_recycles_itself_after_max_tasks(site: Bookstore, redis_client: aioredis.Redis) -> None:
    job = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": [site.product_url(i) for i in range(1, 13)], "politeness": {"requestsPerSecond": 5}}
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=2, allowed_cidrs=ALLOWED, max_tasks=3),
        queue,
        redis_client,
        Keys(PREFIX),
    )
    await asyncio.wait_for(worker.run(), 60)  # returns by itself: drained and stopped
    assert worker.recycled is not None and "max_tasks 3" in worker.recycled
    stats = await queue.job_stats(job_id)
    assert 3 <= stats.succeeded < 12 and stats.in_flight == 0  # nothing held by the exited worker
    assert stats.succeeded + stats.pending + stats.retrying == 12
