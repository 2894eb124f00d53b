"""Browser mode uses the job's sessions (real Chromium, a real site that sets a session cookie): the cookie
a rendered page got is put into the next page's browser context, on this worker or another, and a banned
identity is retired there as in plain fetching."""

from __future__ import annotations

import uuid
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.banfarm import BanFarm
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.runner import Worker, WorkerConfig
from worker_runs import run_to_end

PREFIX = "trawl:{test/render-sessions}"


async def _run(redis: aioredis.Redis, spec: dict[str, Any]) -> tuple[str, Queue]:
    job = ScrapeJobSpec.model_validate({"pool": "render", "politeness": {"requestsPerSecond": 1000}, **spec})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=30)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config = WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=1, allowed_cidrs=["127.0.0.2/32"])
    worker = Worker(config, queue, redis, Keys(PREFIX))
    await run_to_end(worker, queue, job_id, 120, 60)
    return job_id, queue


async def test_rendered_pages_keep_the_sessions_cookie_and_retire_a_banned_one(redis_client: aioredis.Redis) -> None:
    async with BanFarm(host="127.0.0.2", ban_after=2) as site:
        spec = {
            "urls": [site.page_url(i) for i in range(6)],
            "render": {"mode": "Browser"},
            "session": {"poolSize": 1},
            "retry": {"maxAttempts": 1},
        }
        job_id, queue = await _run(redis_client, spec)
        stats = await queue.job_stats(job_id)
        assert stats.succeeded == 6 and stats.dead == 0, stats
        pages = [v for v in site.visits if v.path.startswith("/page/")]
        assert pages[0].sid is None and pages[1].sid is not None  # the first page's cookie, in the next context
        banned = [v for v in pages if v.banned]
        assert banned, pages
        for visit in banned:  # retired: its cookie never sent again
            assert not any(v.sid == visit.sid for v in pages[pages.index(visit) + 1 :])
        assert len({v.sid for v in pages if v.sid}) >= 2
