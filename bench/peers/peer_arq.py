"""arq (asyncio; jobs are kept in a sorted set and re-run if a worker dies before finishing them)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from common import DONE_KEY, URL

SETTINGS = RedisSettings.from_dsn(URL)


async def noop(ctx: dict[str, Any], i: int) -> None:
    await ctx["redis"].incr(DONE_KEY)


class WorkerSettings:
    functions = [noop]
    redis_settings = SETTINGS
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "8"))
    keep_result = 0
    poll_delay = 0.01
    handle_signals = True


def run_worker() -> None:
    """The worker, as ``arq peer_arq.WorkerSettings`` runs it, without a log line per job."""
    import logging

    from arq.worker import run_worker as arq_run_worker

    logging.basicConfig(level=logging.WARNING)
    arq_run_worker(WorkerSettings)  # type: ignore[arg-type]


def enqueue(n: int) -> None:
    async def run() -> None:
        pool = await create_pool(SETTINGS)
        try:
            for start in range(0, n, 500):
                await asyncio.gather(*(pool.enqueue_job("noop", i) for i in range(start, min(n, start + 500))))
        finally:
            await pool.aclose()

    asyncio.run(run())
