"""extract.formats screenshot end to end: the real worker renders in headless Chromium and the record
carries the PNG beside the other formats, with no render.screenshot set."""

from __future__ import annotations

import base64

import redis.asyncio as aioredis
from test_browser_render import run_job

from trawl.dev.bookstore import Renderer
from trawl.dev.jsbookstore import Hits, listing_paths


async def test_the_screenshot_format_is_the_browsers_png(
    js_site: tuple[str, Renderer, Hits], redis_client: aioredis.Redis
) -> None:
    base, renderer, _hits = js_site
    url = base + listing_paths(renderer, "js")[0]
    job_id, queue, _worker, records = await run_job(
        redis_client,
        {"urls": [url], "extract": {"formats": ["screenshot", "links"]}, "render": {"mode": "Browser"}},
        pages=1,
    )
    assert (await queue.job_stats(job_id)).succeeded == 1
    [record] = records
    assert base64.b64decode(record["screenshot"]).startswith(b"\x89PNG\r\n")
    assert record["links"] and "screenshot" not in (record.get("truncated") or [])
