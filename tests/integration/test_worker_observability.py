"""Backpressure from a slow sink, Prometheus metrics, worker activity reported through heartbeats."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Bookstore
from trawl.dev.procs import free_port
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.runner import Worker, WorkerConfig

PREFIX = "trawl:{test/obs}"


@pytest.fixture
async def slow_hook() -> AsyncIterator[tuple[str, list[int]]]:
    sizes: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(0.4)  # a slow downstream
        sizes.append(len(body["records"]))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/hook", sizes
    finally:
        await runner.cleanup()


async def test_slow_sink_backpressure_metrics_and_activity(
    site: Bookstore, redis_client: aioredis.Redis, slow_hook: tuple[str, list[int]]
) -> None:
    hook_url, sizes = slow_hook
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "obs",
            "urls": [site.product_url(i) for i in range(1, 61)],
            "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 32, "respectRobotsTxt": False},
            "output": {"sink": "Webhook", "webhook": {"url": hook_url, "batchSize": 100}},
        }
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    port = free_port()
    config = WorkerConfig(
        prefix=PREFIX,
        worker_id="obs-1",
        concurrency=4,
        sink_capacity=6,
        heartbeat_seconds=0.2,
        metrics_port=port,
        allowed_cidrs=["127.0.0.2/32", "127.0.0.1/32"],
    )
    worker = Worker(config, queue, redis_client, Keys(PREFIX))
    runner = asyncio.create_task(worker.run())
    peak = 0
    reported: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (await queue.job_stats(job_id)).finished:
            assert time.monotonic() < deadline and not runner.done()
            peak = max(peak, worker.in_flight)
            activity = (await queue.pool_signals()).workers.get("obs-1")
            if activity is not None:
                reported.append(activity.in_flight)
            await asyncio.sleep(0.01)
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            metrics = await resp.text()
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    # claims stopped while results waited for the slow sink: never more leases than slots + buffer
    assert peak <= 4 + 6 + 4  # concurrency + capacity (+ one claim batch in flight while the check ran)
    assert sum(sizes) == 60 and max(sizes) <= 4 + 6 + 4 and len(sizes) >= 4
    assert reported and max(reported) > 0  # heartbeats report the worker's activity to the pool
    assert 'trawl_worker_fetches_total{outcome="ok"} 60.0' in metrics
    assert 'trawl_worker_task_outcomes_total{outcome="acked"} 60.0' in metrics
    assert "trawl_worker_fetch_seconds_bucket" in metrics and "trawl_worker_in_flight" in metrics
    stats = await queue.job_stats(job_id)
    assert stats.succeeded == 60


async def test_busy_metrics_port_is_a_clear_error_not_a_crash(
    site: Bookstore, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the metrics port (Prometheus's 9090, say): the worker says so, serves no
    /metrics (so its readiness probe fails and the pod shows not ready) and still does its work."""
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "obs",
            "urls": [site.product_url(i) for i in range(1, 6)],
            "politeness": {"requestsPerSecond": 1000, "respectRobotsTxt": False},
        }
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = WorkerConfig(
            prefix=PREFIX,
            worker_id="obs-busy",
            concurrency=2,
            metrics_port=port,
            metrics_address="127.0.0.1",
            allowed_cidrs=["127.0.0.2/32"],
        )
        worker = Worker(config, queue, redis_client, Keys(PREFIX))
        runner = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 60
            while not (await queue.job_stats(job_id)).finished:
                assert time.monotonic() < deadline, "job did not finish"
                assert not runner.done(), runner.exception() if runner.done() else None
                await asyncio.sleep(0.05)
        finally:
            worker.request_stop()
            await asyncio.wait_for(runner, 30)
    assert (await queue.job_stats(job_id)).succeeded == 5
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(f"cannot listen on 127.0.0.1:{port}" in m and "not ready" in m for m in errors), errors
