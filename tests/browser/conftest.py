"""Browser layer: real headless Chromium (Debian's package) driven by Playwright, real Redis, sites on loopback."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from trawl.dev.bookstore import Renderer, catalog
from trawl.dev.jsbookstore import Hits, build_app
from trawl.worker.browser.settings import find_chromium

SITE_HOST = "127.0.0.2"  # the fixture site: allowed explicitly, as the other worker tests allow theirs
PROTECTED_HOST = "127.0.0.3"  # a server the pages must never reach: loopback, not allowed


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if find_chromium() is None:
        reason = "no Chromium: install Debian's chromium package (make test does: hack/bootstrap.sh)"
    elif importlib.util.find_spec("playwright") is None:
        reason = "Playwright is not installed (pip install -e '.[test]')"
    if reason is None:
        return
    for item in items:
        if "tests/browser/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.skip(reason=reason))


async def serve(app: web.Application, host: str) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://{host}:{port}"


@pytest.fixture
async def js_site() -> AsyncIterator[tuple[str, Renderer, Hits]]:
    """The bookstore's listings three ways (trawl.dev.jsbookstore) in this process, on SITE_HOST: its URL, its
    pages' renderer and the paths it was asked for."""
    renderer = Renderer(catalog(3, 10, 5))  # 6 listings of 5 products: small, the machine is shared
    hits = Hits()
    runner, url = await serve(build_app(renderer, hits), SITE_HOST)
    try:
        yield url, renderer, hits
    finally:
        await runner.cleanup()


@pytest.fixture
async def protected() -> AsyncIterator[tuple[str, list[str]]]:
    """A server on a loopback address that is not allowed; it records every request it gets."""
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="secret")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner, url = await serve(app, PROTECTED_HOST)
    try:
        yield url, hits
    finally:
        await runner.cleanup()
