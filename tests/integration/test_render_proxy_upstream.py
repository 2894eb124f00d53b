"""The browser's policy proxy chained through the job's upstream proxy (real tinyproxy with Basic auth, real
Dante SOCKS5): pages go through the upstream to the checked address, and what the policy refuses never
reaches the upstream. Chromium itself is not needed: a real HTTP client speaks to the policy proxy as it
does (tests/browser/ drives Chromium through the same proxy)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from aiohttp import web

from trawl.dev.procs import free_port
from trawl.dev.proxy_servers import Danted, TinyProxy
from trawl.egress.addresses import parse_networks
from trawl.worker.browser.proxy import PolicyProxy
from trawl.worker.proxies import parse_proxy_list

SITE = "127.0.0.2"  # allowed
PASSWORD = "br0wser-Proxy-pw"


@pytest.fixture
async def site() -> AsyncIterator[tuple[int, list[str]]]:
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=b"through")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port(SITE)
    await web.TCPSite(runner, SITE, port).start()
    try:
        yield port, hits
    finally:
        await runner.cleanup()


@pytest.fixture(params=["http", "socks5"])
def upstream(request: pytest.FixtureRequest) -> Iterator[TinyProxy | Danted]:
    server: TinyProxy | Danted = TinyProxy(username="b", password=PASSWORD) if request.param == "http" else Danted()
    with server:
        yield server


def _upstream_url(server: TinyProxy | Danted) -> str:
    return server.url("b", PASSWORD) if isinstance(server, TinyProxy) else server.url()


def _seen(server: TinyProxy | Danted) -> list[str]:
    """The upstream's log lines for connections it made (tinyproxy: CONNECT requests; Dante: connects)."""
    marker = "Request (file descriptor" if isinstance(server, TinyProxy) else "tcp/connect"
    return [line for line in server.log().splitlines() if marker in line]


async def test_pages_go_through_the_upstream_and_refusals_never_reach_it(
    site: tuple[int, list[str]], upstream: TinyProxy | Danted
) -> None:
    port, hits = site
    (endpoint,) = parse_proxy_list(_upstream_url(upstream))
    async with (
        PolicyProxy(parse_networks([f"{SITE}/32"]), upstream=endpoint) as policy,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"http://{SITE}:{port}/page", proxy=policy.url) as resp:
            assert resp.status == 200 and await resp.read() == b"through"
        for url in (f"http://127.0.0.1:{upstream.port}/steal", f"http://localhost:{upstream.port}/steal"):
            async with http.get(url, proxy=policy.url) as resp:
                assert resp.status == 403, url
    assert hits == ["/page"]
    seen = _seen(upstream)
    assert len(seen) == 1 and f"{SITE}" in seen[0], upstream.log()  # the checked address, once


async def test_a_failing_upstream_is_a_502_naming_it_without_credentials(site: tuple[int, list[str]]) -> None:
    port, _hits = site
    (endpoint,) = parse_proxy_list(f"http://b:{PASSWORD}@127.0.0.1:{free_port()}")
    async with (
        PolicyProxy(parse_networks([f"{SITE}/32"]), upstream=endpoint) as policy,
        aiohttp.ClientSession() as http,
        http.get(f"http://{SITE}:{port}/page", proxy=policy.url) as resp,
    ):
        assert resp.status == 502
        refused = resp.headers.get("X-Trawl-Refused", "") + await resp.text()
    assert endpoint.label in refused and PASSWORD not in refused
