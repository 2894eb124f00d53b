"""Browser mode through the job's upstream proxy (real Chromium, real tinyproxy with Basic auth): the page
comes through the proxy, to the checked address, and the page's scripts still reach nothing the pool does
not allow — the proxy never sees those requests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev.bookstore import Renderer
from trawl.dev.jsbookstore import Hits
from trawl.dev.proxy_servers import TinyProxy
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.runner import Worker, WorkerConfig
from worker_runs import run_to_end

PREFIX = "trawl:{test/render-proxy}"
SITE_HOST = "127.0.0.2"
PASSWORD = "chromium-Proxy-pw"


@pytest.fixture
def tiny() -> Iterator[TinyProxy]:
    with TinyProxy(username="scraper", password=PASSWORD) as proxy:
        yield proxy


async def _run(redis: aioredis.Redis, spec: dict[str, Any], pool: dict[str, Any]) -> tuple[str, Queue, Worker]:
    job = ScrapeJobSpec.model_validate({"pool": "render", "politeness": {"requestsPerSecond": 1000}, **spec})
    pool_spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://unused"}, **pool})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=30)
    await queue.register_job(build_job_config(job_id, job, pool_spec))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config = WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=2, allowed_cidrs=[f"{SITE_HOST}/32"])
    worker = Worker(config, queue, redis, Keys(PREFIX))
    await run_to_end(worker, queue, job_id, 120, 60)
    return job_id, queue, worker


async def test_rendered_pages_go_through_the_proxy_and_scripts_still_reach_nothing_protected(
    js_site: tuple[str, Renderer, Hits],
    protected: tuple[str, list[str]],
    redis_client: aioredis.Redis,
    tiny: TinyProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, _renderer, _hits = js_site
    target, protected_hits = protected
    (tmp_path / "proxies").mkdir()
    (tmp_path / "proxies" / "urls").write_text(tiny.url("scraper", PASSWORD) + "\n")
    monkeypatch.setenv("TRAWL_SECRETS_DIR", str(tmp_path))
    pool = {
        "worker": {"secrets": ["proxies"]},
        "proxies": {"groups": [{"name": "dc", "secretRef": {"name": "proxies", "key": "urls"}, "default": True}]},
    }
    url = f"{base}/hostile/ssrf.html?target={target}"
    job_id, queue, worker = await _run(
        redis_client,
        {
            "urls": [url],
            "extract": {"fields": [{"name": "state", "selector": "#state"}]},
            "render": {"mode": "Browser", "waitFor": "NetworkIdle", "timeoutSeconds": 20},
        },
        pool,
    )
    assert (await queue.job_stats(job_id)).succeeded == 1, await queue.dead_letters(job_id)
    assert protected_hits == []
    requests = [line for line in tiny.log().splitlines() if "Request (file descriptor" in line]
    port = base.rsplit(":", 1)[1]
    assert any(f"CONNECT {SITE_HOST}:{port}" in line for line in requests), tiny.log()  # the page came through it
    assert all(SITE_HOST in line for line in requests), requests  # and nothing else went to it
    labels = {"group": "dc", "proxy": f"127.0.0.1:{tiny.port}", "outcome": "ok"}
    assert worker.metrics.registry.get_sample_value("trawl_worker_proxy_requests_total", labels) == 1
