"""The operator's side of a refresh job's sweep, through its own job pass (reconcile_job) on a real
redis-server: once the run's own tasks are done, the pass adds the sweep task (the job stays Running, not
Succeeded) exactly once; the job succeeds when the sweep is done. A run that will fail (too many dead
letters) is not swept, nor is a job without spec.refresh."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from job_passes import JobPasses, one_pool
from trawl.dev.redis_server import RedisServer
from trawl.queue import Queue
from trawl.queue.keys import pool_prefix
from trawl.queue.model import SWEEP_DEPTH, sweep_cursor

NAMESPACE, POOL = "sweep", "pool"


def passes(redis_url: str, uid: str, spec: dict[str, Any]) -> JobPasses:
    index = one_pool(NAMESPACE, POOL, {"redis": {"url": redis_url}})
    return JobPasses(uid, uid, {"pool": POOL, **spec}, index, namespace=NAMESPACE)


async def work(queue: Queue, *, fail: bool = False) -> list[str]:
    """Play a worker: take every ready task, ack it (or fail it for good); the URLs taken."""
    tasks = await queue.claim("w", 100)
    for task in tasks:
        if fail and sweep_cursor(task) is None:
            await queue.fail(task, "w", "HttpError", "500")
        else:
            await queue.ack_many([task], "w")
    return [t.url for t in tasks]


async def test_a_refresh_job_is_swept_once_before_it_succeeds(redis_server: RedisServer) -> None:
    urls = ["https://shop.example.com/a", "https://shop.example.com/b"]
    job = passes(redis_server.url, "uid-sweep", {"urls": urls, "refresh": {"lineage": "shop"}})
    assert (await job.run())["phase"] in ("Pending", "Queued")
    queue = Queue(aioredis.from_url(redis_server.url), pool_prefix(NAMESPACE, POOL))
    assert sorted(await work(queue)) == urls
    status = await job.run()
    assert status["phase"] == "Running", "the run's pages are done; its sweep is not"
    taken = await queue.claim("w", 100)
    assert [(t.depth, sweep_cursor(t)) for t in taken] == [(SWEEP_DEPTH, "0")]
    await queue.ack_many(taken, "w")
    assert (await job.run())["phase"] == "Succeeded"
    assert await queue.enqueue_sweep("uid-sweep") == 0, "added once"


async def test_no_sweep_for_a_failing_run_nor_without_refresh(redis_server: RedisServer) -> None:
    urls = ["https://shop.example.com/a"]
    once = {"retry": {"maxAttempts": 1}}
    failing = passes(redis_server.url, "uid-fail", {"urls": urls, "refresh": {"lineage": "shop"}, **once})
    plain = passes(redis_server.url, "uid-plain", {"urls": urls})
    for job, fail, phase in ((failing, True, "Failed"), (plain, False, "Succeeded")):
        await job.run()
        queue = Queue(aioredis.from_url(redis_server.url), pool_prefix(NAMESPACE, POOL))
        assert await work(queue, fail=fail) == urls
        assert (await job.run())["phase"] == phase
        assert await queue.claim("w", 100) == []
