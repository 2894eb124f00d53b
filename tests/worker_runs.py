"""One job to its end on a worker running in the test's own event loop (integration and browser layers)."""

from __future__ import annotations

import asyncio

from trawl.queue.client import Queue
from trawl.worker.runner import Worker
from waits import wait_for_async


async def run_to_end(worker: Worker, queue: Queue, job_id: str, bound: float = 120, stop_bound: float = 60) -> None:
    """Run ``worker`` until the job is finished (its stats on failure), then stop it, also when the wait fails."""
    runner = asyncio.create_task(worker.run())

    async def finished() -> bool:
        return (await queue.job_stats(job_id)).finished

    try:
        await wait_for_async(
            "the job to finish", finished, bound, 0.05, diag=lambda: queue.job_stats(job_id), runner=runner
        )
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, stop_bound)
