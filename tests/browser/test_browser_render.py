"""Browser rendering end to end: the real worker, queue and Redis, headless Chromium and loopback sites."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from prometheus_client import CollectorRegistry

from trawl.api.render import RenderSpec
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Renderer
from trawl.dev.jsbookstore import LISTING_FIELDS, Hits, listing_paths
from trawl.egress.addresses import parse_networks
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.browser.metrics import BrowserMetrics
from trawl.worker.browser.pool import BrowserPool
from trawl.worker.browser.settings import BrowserSettings
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/render}"
SITE_HOST = "127.0.0.2"  # the fixture site: allowed explicitly, as the other worker tests allow theirs
ALLOWED = [f"{SITE_HOST}/32"]  # the protected server's 127.0.0.3 is NOT allowed
POLITE = {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8}


async def run_job(
    redis: aioredis.Redis,
    spec: dict[str, Any],
    *,
    wait_seconds: float = 120.0,
    pages: int = 4,
    during: Callable[[Worker], Any] | None = None,
) -> tuple[str, Queue, Worker, list[dict[str, Any]]]:
    """Run one in-process worker until the job finishes; returns its records."""
    job = ScrapeJobSpec.model_validate({"pool": "render", "politeness": POLITE, **spec})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=30)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=2 * pages, allowed_cidrs=ALLOWED),
        queue,
        redis,
        Keys(PREFIX),
    )
    worker.renderer.settings = BrowserSettings(pages_per_browser=pages)
    runner = asyncio.create_task(worker.run())
    watcher = asyncio.create_task(during(worker)) if during is not None else None

    async def finished() -> bool:
        return (await queue.job_stats(job_id)).finished

    try:
        await wait_for_async(
            "the job to finish", finished, wait_seconds, 0.05, diag=lambda: queue.job_stats(job_id), runner=runner
        )
    finally:
        if watcher is not None:
            watcher.cancel()
        worker.request_stop()
        await asyncio.wait_for(runner, 60)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    return job_id, queue, worker, [json.loads(fields[b"data"]) for _id, fields in entries]


def by_listing(records: list[dict[str, Any]], flavour: str) -> dict[str, dict[str, Any]]:
    """Records keyed by the listing path without its flavour prefix, with only the extracted fields."""
    out = {}
    for r in records:
        path = r["url"].split("/", 3)[3]
        assert path.startswith(flavour + "/"), r["url"]
        out[path[len(flavour) :]] = {k: r[k] for k in ("names", "prices", "links", "heading", "title")}
    return out


async def test_script_built_and_xhr_fed_lists_yield_the_static_records(
    js_site: tuple[str, Renderer, Hits], redis_client: aioredis.Redis
) -> None:
    base, renderer, _hits = js_site
    extract = {"fields": LISTING_FIELDS}
    results = {}
    for flavour, render in (
        ("static", None),
        ("js", {"mode": "Browser"}),
        ("xhr", {"mode": "Browser", "waitFor": "Selector", "selector": "ol.items li.item"}),
    ):
        urls = [base + p for p in listing_paths(renderer, flavour)]
        spec: dict[str, Any] = {"urls": urls, "extract": extract}
        if render is not None:
            spec["render"] = render
        t0 = time.monotonic()
        job_id, queue, _worker, records = await run_job(redis_client, spec)
        print(flavour, time.monotonic() - t0)
        stats = await queue.job_stats(job_id)
        assert (stats.succeeded, stats.dead) == (len(urls), 0), await queue.dead_letters(job_id)
        results[flavour] = by_listing(records, flavour)
        assert len(results[flavour]) == len(urls) == 6
        if render is not None:
            assert all(r["render"]["blockedRequests"] == 0 for r in records)
    static = results["static"]
    assert sum(len(v["names"]) for v in static.values()) == 30  # every product listed once
    assert all(len(v["names"]) == len(v["prices"]) > 0 for v in static.values())
    assert results["js"] == static
    assert results["xhr"] == static


async def test_page_scripts_cannot_reach_loopback_or_metadata(
    js_site: tuple[str, Renderer, Hits],
    protected: tuple[str, list[str]],
    redis_client: aioredis.Redis,
) -> None:
    base, _renderer, _hits = js_site
    target, protected_hits = protected
    url = f"{base}/hostile/ssrf.html?target={target}"
    job_id, queue, worker, records = await run_job(
        redis_client,
        {
            "urls": [url],
            "extract": {"fields": [{"name": "state", "selector": "#state"}]},
            "render": {"mode": "Browser", "waitFor": "NetworkIdle", "timeoutSeconds": 20},
        },
    )
    assert (await queue.job_stats(job_id)).succeeded == 1
    [record] = records
    assert record["state"] == "tried"  # the script ran to its end, and its data:/file: navigations went nowhere
    assert protected_hits == []  # fetch, XHR, WebSocket, beacon, popup, iframe, image: none got through
    # fetch, XHR, WebSocket, beacon, iframe and image towards the protected host, and the metadata address
    assert record["render"]["blockedRequests"] >= 4
    assert record["finalUrl"] == url  # no popup or navigation took the page elsewhere
    pool = worker.renderer.pool
    assert pool is not None
    blocked_metric = worker.metrics.registry.get_sample_value("trawl_worker_browser_blocked_requests_total")
    assert blocked_metric is not None and blocked_metric >= 4


async def test_never_idle_page_ends_at_its_time_cap(
    js_site: tuple[str, Renderer, Hits], redis_client: aioredis.Redis
) -> None:
    base, _renderer, hits = js_site
    cap = 3.0
    started = time.monotonic()
    job_id, queue, _worker, records = await run_job(
        redis_client,
        {
            "urls": [f"{base}/hostile/never-idle.html"],
            "extract": {"fields": [{"name": "rows", "selector": "p.row", "multiple": True}]},
            "render": {"mode": "Browser", "waitFor": "NetworkIdle", "timeoutSeconds": cap, "screenshot": True},
        },
    )
    assert (await queue.job_stats(job_id)).succeeded == 1
    [record] = records
    assert record["render"]["timedOut"] is True
    assert cap <= record["render"]["seconds"] < cap + 10  # taken at the cap, not after a lease or a retry
    assert record["rows"]  # the page as it was at the cap, rows appended so far included
    assert base64.b64decode(record["screenshot"]).startswith(b"\x89PNG\r\n")  # taken at the cap too
    assert hits.paths.count("/api/tick") >= 3  # the page really kept the network busy
    assert time.monotonic() - started < 60


async def test_a_browser_crash_loses_no_task(js_site: tuple[str, Renderer, Hits], redis_client: aioredis.Redis) -> None:
    base, renderer, _hits = js_site
    urls = [base + p for p in listing_paths(renderer, "js")]
    killed: list[int] = []

    async def kill_browser_mid_render(worker: Worker) -> None:
        while True:
            pool = worker.renderer.pool
            pages = worker.metrics.registry.get_sample_value("trawl_worker_browser_pages") or 0
            if pool is not None and pool.browser_pids() and pages >= 2:
                pid = pool.browser_pids()[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            await asyncio.sleep(0.02)

    job_id, queue, worker, records = await run_job(
        redis_client,
        {
            "urls": urls,
            "extract": {"fields": LISTING_FIELDS},
            # each page stays open a while, so the kill lands while pages are being rendered
            "render": {"mode": "Browser", "waitFor": "Delay", "delaySeconds": 1.0},
            "retry": {"maxAttempts": 3, "initialDelaySeconds": 0.1},
        },
        during=kill_browser_mid_render,
    )
    assert killed, "the browser was never killed"
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (len(urls), 0), await queue.dead_letters(job_id)
    assert sorted(r["url"] for r in records) == sorted(urls)  # every URL exactly once
    assert sum(len(r["names"]) for r in records) == 30  # the lists were rendered in full
    given_back = worker.metrics.registry.get_sample_value(
        "trawl_worker_rate_limit_deferrals_total", {"reason": "browser_crash"}
    )
    assert given_back is not None and given_back >= 2  # the pages cut by the crash went back, no attempt spent...
    assert max(r["attempt"] for r in records) == 1
    pool = worker.renderer.pool
    assert pool is not None and pool.launches >= 2  # ...and were rendered in a new browser
    restarts = worker.metrics.registry.get_sample_value("trawl_worker_browser_restarts_total", {"reason": "crash"})
    assert restarts == 1


async def test_blocked_resource_types_are_never_requested_and_a_browser_over_its_memory_is_replaced(
    js_site: tuple[str, Renderer, Hits],
) -> None:
    base, _renderer, hits = js_site
    registry = CollectorRegistry()
    # a ceiling every browser is over: each render's memory check retires the browser it ran in
    pool = BrowserPool(
        parse_networks(ALLOWED), BrowserSettings(pages_per_browser=2, memory_limit_bytes=1), BrowserMetrics(registry)
    )
    try:
        spec = RenderSpec.model_validate({"mode": "Browser", "blockResources": ["image", "font", "media"]})
        for _ in range(2):
            result = await pool.render(f"{base}/media/page.html", spec)
            assert b'id="top"' in result.fetch.body
        assert hits.paths.count("/media/style.css") == 2  # not blocked: fetched each time
        assert "/media/pic.png" not in hits.paths  # blocked: never requested
        assert (
            registry.get_sample_value("trawl_worker_browser_aborted_requests_total", {"reason": "resource_type"}) == 2
        )
        assert pool.launches == 2  # the second page ran in a new browser
        assert registry.get_sample_value("trawl_worker_browser_restarts_total", {"reason": "memory"}) == 2
        assert (registry.get_sample_value("trawl_worker_browser_memory_bytes") or 0) > 10 * 2**20  # measured PSS
    finally:
        await pool.close()
    assert pool.browser_pids() == []


async def test_without_a_usable_sandbox_chromium_is_started_again_without_it(
    js_site: tuple[str, Renderer, Hits], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where Chromium's sandbox cannot start (here: root, as under a seccomp profile that forbids user
    namespaces), the first launch fails, the worker says so and runs Chromium with --no-sandbox."""
    from trawl.worker.browser import settings as render_settings

    base, renderer, _hits = js_site
    monkeypatch.setattr(render_settings, "needs_no_sandbox", lambda: False)  # first try with the sandbox
    registry = CollectorRegistry()
    pool = BrowserPool(parse_networks(ALLOWED), BrowserSettings(), BrowserMetrics(registry))
    try:
        url = base + listing_paths(renderer, "js")[0]
        result = await pool.render(url, RenderSpec.model_validate({"mode": "Browser"}))
        assert result.fetch.body.count(b'class="item"') == 5
        assert registry.get_sample_value("trawl_worker_browser_restarts_total", {"reason": "no_sandbox"}) == 1
        assert pool.launches == 1
    finally:
        await pool.close()


async def test_only_matching_urls_go_through_the_browser(
    js_site: tuple[str, Renderer, Hits], redis_client: aioredis.Redis
) -> None:
    base, renderer, _hits = js_site
    static, js = base + listing_paths(renderer, "static")[0], base + listing_paths(renderer, "js")[0]
    _job_id, _queue, _worker, records = await run_job(
        redis_client,
        {
            "urls": [static, js],
            "extract": {"fields": LISTING_FIELDS},
            "render": {"mode": "Browser", "onlyMatching": "/js/"},
        },
    )
    by_url = {r["url"]: r for r in records}
    assert "render" not in by_url[static] and "render" in by_url[js]  # fetched plainly vs rendered
    assert by_url[static]["names"] == by_url[js]["names"] and len(by_url[js]["names"]) == 5


async def test_a_domain_rule_decides_which_hosts_pages_go_through_the_browser(
    js_site: tuple[str, Renderer, Hits], redis_client: aioredis.Redis
) -> None:
    """politeness.domains[].render: Browser for the site's host renders a job that has no render of its own
    (with the default render settings); Fetch fetches a Browser job's pages plainly."""
    base, renderer, _hits = js_site
    host = base.split("//", 1)[1].rsplit(":", 1)[0]
    urls = [base + listing_paths(renderer, "static")[0], base + listing_paths(renderer, "js")[0]]
    for rule, render, rendered in (("Browser", None, True), ("Fetch", {"mode": "Browser"}, False)):
        spec: dict[str, Any] = {
            "urls": urls,
            "extract": {"fields": LISTING_FIELDS},
            "politeness": {**POLITE, "domains": [{"host": host, "render": rule}]},
        }
        if render is not None:
            spec["render"] = render
        _job_id, _queue, _worker, records = await run_job(redis_client, spec)
        assert {r["url"]: "render" in r for r in records} == dict.fromkeys(urls, rendered), (rule, records)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """``app`` on a free port of SITE_HOST: its runner and URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, SITE_HOST, 0)
    await site.start()
    return runner, f"http://{SITE_HOST}:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


async def test_a_jobs_headers_go_to_its_own_origin_never_to_a_pages_third_parties(redis_client: aioredis.Redis) -> None:
    # The page (the job's own origin) loads an image, a script and an XHR from another origin (another port of
    # the site's host: allowed by the address policy, so only the header rule keeps the credentials from it),
    # one more through a redirect from its own origin, and one image of its own.
    secret = {"Authorization": "Bearer s3cret", "Cookie": "session=s3cret", "X-Api-Key": "s3cret"}
    seen: dict[str, dict[str, str]] = {}

    async def record(request: web.Request) -> web.Response:
        seen[f"{request.host}{request.path}"] = dict(request.headers)
        if request.path == "/redirect":
            raise web.HTTPFound(request.query["to"])
        body = "ok" if request.path != "/page.html" else page.replace("OTHER", other_url)
        return web.Response(text=body, content_type="text/html" if request.path == "/page.html" else "text/plain")

    page = (
        '<html><body><h1>page</h1><img src="OTHER/pixel.png"><img src="/own.png">'
        '<img src="/redirect?to=OTHER/redirected.png"><script src="OTHER/lib.js"></script>'
        '<script>fetch("OTHER/xhr").catch(() => 0)</script></body></html>'
    )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    own_runner, own_url = await _serve(app)
    other_runner, other_url = await _serve(app)
    try:
        _job_id, _queue, _worker, records = await run_job(
            redis_client,
            {
                "urls": [own_url + "/page.html"],
                "request": {"headers": secret},
                "render": {"mode": "Browser", "waitFor": "NetworkIdle", "timeoutSeconds": 20},
            },
            pages=1,
        )
    finally:
        await own_runner.cleanup()
        await other_runner.cleanup()
    assert len(records) == 1, records
    own_host, other_host = own_url.split("//", 1)[1], other_url.split("//", 1)[1]
    third_party = {k: v for k, v in seen.items() if k.startswith(other_host)}
    assert {f"{other_host}/{p}" for p in ("pixel.png", "redirected.png", "lib.js", "xhr")} <= set(third_party), seen
    for path, headers in third_party.items():
        assert not {k.lower() for k in secret} & {k.lower() for k in headers}, (
            path,
            {k: v for k, v in headers.items() if "s3cret" in v},
        )
    for path in ("page.html", "own.png", "redirect"):  # the job's own origin gets them, page and subresources
        got = seen[f"{own_host}/{path}"]
        assert {k: got.get(k) for k in secret} == secret, (path, got)


async def test_a_request_made_with_the_jobs_headers_still_passes_the_address_policy(
    protected: tuple[str, list[str]], redis_client: aioredis.Redis
) -> None:
    # Requests of the job's own origin are made with its headers by Playwright (not Chromium's network stack,
    # which would carry them on across a redirect): through the page's policy proxy all the same.
    url, hits = protected
    job_id, queue, _worker, records = await run_job(
        redis_client,
        {
            "urls": [url + "/secret"],
            "request": {"headers": {"Authorization": "Bearer s3cret"}},
            "render": {"mode": "Browser"},
        },
        pages=1,
    )
    [dead] = await queue.dead_letters(job_id)
    assert records == [] and dead.error_class == "BlockedAddress", dead
    assert hits == []
