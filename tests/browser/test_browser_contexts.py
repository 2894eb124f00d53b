"""Shared browser contexts (trawl.worker.browser.contexts) in real Chromium: the pages of one job share a
context, two jobs rendering at the same time never see each other's cookies or storage (as a tenant
would try: plant state, then look for another's), two sessions of one job do not either, and a reused
context still sends every connection through the address policy, a redirect's included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from trawl.api.policies import FailureClass
from trawl.api.render import RenderSpec
from trawl.egress.addresses import parse_networks
from trawl.worker.browser.metrics import BrowserMetrics
from trawl.worker.browser.pool import BrowserPool
from trawl.worker.browser.settings import BrowserSettings
from trawl.worker.cookies import SessionJar
from trawl.worker.fetch import FetchError

SITE_HOST = "127.0.0.2"
ALLOWED = parse_networks([f"{SITE_HOST}/32"])  # the protected server's 127.0.0.3 is not allowed

# plant: the job's mark in a cookie (from the server and from script), localStorage and IndexedDB-free
# sessionless state; peek: what the page can see of any mark, written into the page for the snapshot
PLANT = """<html><body><p id="seen">planting</p><script>
document.cookie = "js_who=MARK; path=/";
localStorage.setItem("who", "MARK");
document.getElementById("seen").textContent = "planted";
</script></body></html>"""
PEEK = """<html><body><p id="seen"></p><script>
document.getElementById("seen").textContent =
  "cookie=" + document.cookie + ";storage=" + (localStorage.getItem("who") || "");
</script></body></html>"""


@pytest.fixture
async def marks_site() -> AsyncIterator[str]:
    async def plant(request: web.Request) -> web.Response:
        mark = request.query["mark"]
        response = web.Response(text=PLANT.replace("MARK", mark), content_type="text/html")
        response.set_cookie("who", mark, path="/")
        return response

    async def peek(request: web.Request) -> web.Response:
        return web.Response(text=PEEK, content_type="text/html")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    app = web.Application()
    app.router.add_get("/plant", plant)
    app.router.add_get("/peek", peek)
    app.router.add_get("/redirect", redirect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, SITE_HOST, 0)
    await site.start()
    try:
        yield f"http://{SITE_HOST}:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def seen(body: bytes) -> str:
    text = body.decode()
    return text.split('<p id="seen">', 1)[1].split("</p>", 1)[0]


# each page stays open a second, so the two jobs' pages are in the browser at the same time
HELD = RenderSpec.model_validate({"mode": "Browser", "waitFor": "Delay", "delaySeconds": 1.0})


async def test_two_jobs_rendering_at_once_never_see_each_others_cookies_or_storage(marks_site: str) -> None:
    registry = CollectorRegistry()
    pool = BrowserPool(ALLOWED, BrowserSettings(pages_per_browser=4), BrowserMetrics(registry))

    async def job(mark: str) -> list[str]:
        views = []
        for path in ("/peek", f"/plant?mark={mark}", "/peek"):
            result = await pool.render(marks_site + path, HELD, job_id=f"job-{mark}")
            views.append(seen(result.fetch.body))
        return views

    try:
        a, b = await asyncio.gather(job("a"), job("b"))
        assert a[0] == b[0] == "cookie=;storage="  # nothing before the job planted anything
        assert a[1] == b[1] == "planted"
        # a job's later page sees what its own earlier page left (the context is shared within the job)...
        assert a[2] == "cookie=who=a; js_who=a;storage=a", a
        # ...and never the other job's, though both were in the browser at the same time
        assert b[2] == "cookie=who=b; js_who=b;storage=b", b
        assert registry.get_sample_value("trawl_worker_browser_contexts_opened_total") == 2
        assert pool.launches == 1

        # two sessions of one job are two identities: two contexts, the second sees nothing of the first
        first, second = SessionJar(), SessionJar()
        first.owner, second.owner = "sessions/1", "sessions/2"
        await pool.render(marks_site + "/plant?mark=s1", HELD, job_id="job-s", cookies=first)
        assert "who" in str(first.dump())  # the page's cookies went back to its session's jar
        result = await pool.render(marks_site + "/peek", HELD, job_id="job-s", cookies=second)
        assert seen(result.fetch.body) == "cookie=;storage=", seen(result.fetch.body)
        result = await pool.render(marks_site + "/peek", HELD, job_id="job-s", cookies=first)
        assert seen(result.fetch.body) == "cookie=who=s1; js_who=s1;storage=s1", seen(result.fetch.body)
        assert registry.get_sample_value("trawl_worker_browser_contexts_opened_total") == 4
    finally:
        await pool.close()
    assert pool.browser_pids() == []


async def test_a_reused_context_still_refuses_a_private_address_on_a_redirect(
    marks_site: str, protected: tuple[str, list[str]]
) -> None:
    target, protected_hits = protected
    registry = CollectorRegistry()
    pool = BrowserPool(ALLOWED, BrowserSettings(pages_per_browser=2), BrowserMetrics(registry))
    spec = RenderSpec.model_validate({"mode": "Browser"})
    try:
        ok = await pool.render(marks_site + "/peek", spec, job_id="job-r")  # the context is open and used
        assert seen(ok.fetch.body) == "cookie=;storage="
        with pytest.raises(FetchError) as err:
            await pool.render(f"{marks_site}/redirect?to={target}/secret", spec, job_id="job-r")
        assert err.value.failure_class == FailureClass.BLOCKED_ADDRESS, err.value
        assert "blocked network" in str(err.value)
        # and a page of the same context whose script aims at it: refused, counted on that page
        again = await pool.render(marks_site + "/peek", spec, job_id="job-r")
        assert again.info.blocked_count == 0  # the earlier page's refusal is not this one's
        assert registry.get_sample_value("trawl_worker_browser_contexts_opened_total") == 1  # one context all along
    finally:
        await pool.close()
    assert protected_hits == []
