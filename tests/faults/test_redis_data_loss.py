"""A Redis restarted without persistence comes back empty. The job reconciler (the operator's own
reconcile_job, driven here pass by pass like its timers do) notices by the pool's data epoch and says so
on every affected job: a finished job keeps its status and counts and says its results are gone; a
running job says what was lost, enqueues its URLs again and still ends with one record per URL."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from fault_harness import Job, Workers, ledger, restartable_redis

from job_passes import JobPasses, one_pool
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.operator.connections import RedisConnections
from trawl.queue import Queue
from trawl.queue.keys import Keys
from waits import wait_for_async

NAMESPACE, POOL = "faults", "pool"
PREFIX = "trawl:{faults/pool}"


class Reconciler(JobPasses):
    """One job's reconcile passes, each from the status the previous pass wrote (as the operator does)."""

    def __init__(self, name: str, uid: str, spec: dict[str, Any], redis_url: str, connections: RedisConnections):
        # The pool grants the 1000 requests/s its jobs ask of the loopback site (jobLimits: above the default).
        pool = {"redis": {"url": redis_url}, "jobLimits": {"requestsPerSecond": 1000}}
        super().__init__(name, uid, spec, one_pool(NAMESPACE, POOL, pool), namespace=NAMESPACE, connections=connections)


def job_spec(site: Bookstore, first: int, n: int) -> dict[str, Any]:
    return {
        "pool": POOL,
        "urls": [site.product_url(i) for i in range(first, first + n)],
        "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8},
    }


async def test_redis_restart_without_persistence_is_told_on_every_job(
    site: Bookstore, workers_factory: list[Workers], tmp_path: Path
) -> None:
    data = tmp_path / "redis-data"
    data.mkdir()
    server = restartable_redis(data, aof=False)
    client = aioredis.Redis.from_url(server.url)
    connections = RedisConnections()
    try:
        w = Workers(server, tmp_path, lease_seconds=5)
        workers_factory.append(w)
        w.start("pod-a")
        done = Reconciler("done", "uid-done", job_spec(site, 1, 20), server.url, connections)
        await wait_for_async(
            "the first job to succeed", lambda: _phase(done, "Succeeded"), 120, 0.1, retry_on=(Exception,)
        )
        before = dict(done.status)
        assert before["results"]["count"] == 20

        running = Reconciler("running", "uid-running", job_spec(site, 21, 40), server.url, connections)
        await wait_for_async(
            "the second job's records",
            lambda: _records_at_least(client, running, 6, running.run),
            60,
            0.1,
            retry_on=(Exception,),
        )
        procs.stop(server.proc, sig=signal.SIGKILL, timeout=10)  # type: ignore[arg-type]
        server = restartable_redis(data, port=server.port, aof=False)
        restarted = time.monotonic()

        async def told() -> bool:
            await done.run()
            await running.run()
            return done.condition("DataLost") is not None and running.condition("DataLost") is not None

        await wait_for_async("DataLost on both jobs", told, 30, 1.0, retry_on=(Exception,))
        told_after = time.monotonic() - restarted
        # The finished job keeps its status and counts and says its results are gone; one Warning Event.
        assert done.status["phase"] == "Succeeded"
        assert done.status["counts"] == before["counts"] and done.status["results"]["count"] == 20
        assert "results in Redis are gone" in done.condition("DataLost")["message"]  # type: ignore[index]
        assert [e.reason for e in done.events].count("DataLost") == 1
        # The running job says what was lost and runs again to the end: one record per URL in the new data.
        assert [e.reason for e in running.events].count("DataLost") == 1
        await wait_for_async(
            "the second job to succeed again", lambda: _phase(running, "Succeeded"), 120, 0.1, retry_on=(Exception,)
        )
        terminal_after = time.monotonic() - restarted
        await done.run()
        assert [e.reason for e in done.events].count("DataLost") == 1  # told once, the condition stays
        assert done.condition("DataLost")["status"] == "True"  # type: ignore[index]
        queue = Queue(client, PREFIX)
        job = Job(running.uid, queue, running.spec["urls"])
        book = await ledger(client, job, site)
        print(
            f"\nFAULT-REPORT redis-restart-no-persistence: told_s={told_after:.1f} terminal_s={terminal_after:.1f} "
            f"ledger={book.summary()}"
        )
        assert not book.lost and not book.duplicate_records, book
        assert running.status["results"]["count"] == 40
    finally:
        await connections.close()
        await client.aclose()
        server.stop()


async def _phase(rec: Reconciler, phase: str) -> bool:
    return (await rec.run()).get("phase") == phase


async def _records_at_least(client: aioredis.Redis, rec: Reconciler, n: int, step: Any) -> bool:
    await step()
    return await client.xlen(Keys(PREFIX).results(rec.uid)) >= n
