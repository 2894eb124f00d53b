"""What a page's requests pass through when the job sends no headers of its own (trawl.worker.browser.page):
only documents and the blocked resource types are paused for a decision, every other request goes
straight to the context's policy proxy. So a main-frame redirect passes robots.txt and the rate limit as
a fetch's hop does, the page's scripts come from its context's HTTP cache (which ``page.route`` turns
off), and the address policy refuses exactly what it refused before: a subresource, a script's
navigation or a redirect to a denied address."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from trawl.api.plain import FailureClass
from trawl.api.render import RenderSpec
from trawl.egress.addresses import parse_networks
from trawl.worker.browser.pool import BrowserPool
from trawl.worker.browser.settings import BrowserSettings
from trawl.worker.fetch import FetchError

SITE_HOST = "127.0.0.2"
ALLOWED = parse_networks([f"{SITE_HOST}/32"])  # the protected server's 127.0.0.3 is not allowed
SPEC = RenderSpec.model_validate({"mode": "Browser"})

CACHED_PAGE = """<html><body><p id="seen">no script</p><script src="/app.js"></script></body></html>"""
APP_JS = 'document.getElementById("seen").textContent = "script ran";'
# a page whose script reaches for TARGET: a fetch, a script and then a navigation of the page itself
REACHING = """<html><body><p id="seen">loaded</p><script>
fetch("TARGET/fetch").catch(function () {});
var s = document.createElement("script"); s.src = "TARGET/script.js"; document.body.appendChild(s);
setTimeout(function () { location.href = "TARGET/navigated"; }, 50);
</script></body></html>"""


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[str]]]:
    """A site on SITE_HOST: its URL and the paths it was asked for."""
    hits: list[str] = []

    async def page(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text=CACHED_PAGE, content_type="text/html")

    async def app_js(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text=APP_JS, content_type="text/javascript", headers={"Cache-Control": "max-age=600"})

    async def reaching(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text=REACHING.replace("TARGET", request.query["target"]), content_type="text/html")

    async def redirect(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPFound(request.query["to"])

    app = web.Application()
    app.router.add_get("/page{n}.html", page)
    app.router.add_get("/app.js", app_js)
    app.router.add_get("/reaching.html", reaching)
    app.router.add_get("/redirect", redirect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, SITE_HOST, 0)
    await tcp.start()
    try:
        yield f"http://{SITE_HOST}:{tcp._server.sockets[0].getsockname()[1]}", hits  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_a_main_frame_redirect_passes_the_navigation_hook_as_a_fetch_hop_does(
    site: tuple[str, list[str]],
) -> None:
    base, hits = site
    asked: list[str] = []

    async def hook(url: str) -> None:
        asked.append(url)

    async def refusing(url: str) -> None:
        if url.endswith("/page2.html"):
            raise FetchError(FailureClass.ROBOTS_DISALLOWED, f"robots.txt disallows {url}", url=url)

    pool = BrowserPool(ALLOWED, BrowserSettings(pages_per_browser=2))
    try:
        result = await pool.render(f"{base}/redirect?to=/page1.html", SPEC, before_navigation=hook, job_id="j")
        assert result.fetch.final_url == f"{base}/page1.html"
        # the page's URL (before the browser), then the redirect's hop (paused in the browser)
        assert asked == [f"{base}/redirect?to=/page1.html", f"{base}/page1.html"]
        with pytest.raises(FetchError) as err:
            await pool.render(f"{base}/redirect?to=/page2.html", SPEC, before_navigation=refusing, job_id="j")
        assert err.value.failure_class == FailureClass.ROBOTS_DISALLOWED, err.value
    finally:
        await pool.close()
    assert "/page2.html" not in hits  # the refused hop was never requested


async def test_the_pages_of_a_context_take_their_scripts_from_its_http_cache(site: tuple[str, list[str]]) -> None:
    base, hits = site
    pool = BrowserPool(ALLOWED, BrowserSettings(pages_per_browser=2))
    try:
        for n in (1, 2, 3):
            result = await pool.render(f"{base}/page{n}.html", SPEC, job_id="j")  # one job: one context
            assert b"script ran" in result.fetch.body
    finally:
        await pool.close()
    assert hits.count("/app.js") == 1  # interception off for scripts: the cache is not switched off


async def test_a_subresource_and_a_scripts_navigation_to_a_denied_address_are_refused_and_counted(
    site: tuple[str, list[str]], protected: tuple[str, list[str]]
) -> None:
    base, _hits = site
    target, protected_hits = protected
    navigations: list[str] = []

    async def hook(url: str) -> None:
        navigations.append(url)

    pool = BrowserPool(ALLOWED, BrowserSettings(pages_per_browser=2))
    delay = RenderSpec.model_validate({"mode": "Browser", "waitFor": "Delay", "delaySeconds": 1.0})
    try:
        try:
            result = await pool.render(
                f"{base}/reaching.html?target={target}", delay, before_navigation=hook, job_id="j"
            )
        except FetchError as exc:  # the page ended on the refused navigation's error page
            assert exc.failure_class in (FailureClass.BLOCKED_ADDRESS, FailureClass.BAD_CONTENT), exc
        else:
            assert result.info.blocked_count >= 2, result.info  # the fetch and the script, as this page's own
    finally:
        await pool.close()
    assert f"{target}/navigated" in navigations  # the script's navigation passed the hook, then the proxy
    assert protected_hits == []  # and nothing reached the denied address
