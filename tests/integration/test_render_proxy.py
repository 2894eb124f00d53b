"""The browser's policy proxy on its own: real servers on loopback, a real HTTP client through the proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from trawl.egress.addresses import parse_networks
from trawl.worker.browser.proxy import PolicyProxy

SITE = "127.0.0.2"  # allowed
PROTECTED = "127.0.0.3"  # not allowed


async def serve(host: str, hits: list[str], body: bytes = b"hello") -> tuple[web.AppRunner, int]:
    async def anything(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=body)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    assert site._server is not None
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@pytest.fixture
async def servers() -> AsyncIterator[tuple[int, list[str], int, list[str], int, list[str]]]:
    site_hits: list[str] = []
    protected_hits: list[str] = []
    local_hits: list[str] = []
    runners = []
    try:
        r1, site_port = await serve(SITE, site_hits, b"x" * 200_000)
        runners.append(r1)
        r2, protected_port = await serve(PROTECTED, protected_hits)
        runners.append(r2)
        r3, local_port = await serve("127.0.0.1", local_hits)
        runners.append(r3)
        yield site_port, site_hits, protected_port, protected_hits, local_port, local_hits
    finally:
        for r in runners:
            await r.cleanup()


async def test_only_allowed_addresses_are_reached_by_ip_or_by_name(
    servers: tuple[int, list[str], int, list[str], int, list[str]],
) -> None:
    site_port, site_hits, protected_port, protected_hits, local_port, local_hits = servers
    async with PolicyProxy(parse_networks([f"{SITE}/32"])) as proxy, aiohttp.ClientSession() as http:
        async with http.get(f"http://{SITE}:{site_port}/page?q=1", proxy=proxy.url) as resp:
            assert resp.status == 200 and len(await resp.read()) == 200_000
        assert site_hits == ["/page"]
        # an IP literal, a name that resolves to loopback, the metadata address: refused before connecting
        for url in (
            f"http://{PROTECTED}:{protected_port}/steal",
            f"http://localhost:{local_port}/steal",
            "http://169.254.169.254/latest/meta-data/",
        ):
            async with http.get(url, proxy=proxy.url) as resp:
                assert resp.status == 403, url
                assert "blocked network" in resp.headers["X-Trawl-Refused"]
        # CONNECT (https, wss) is checked the same way
        with pytest.raises(aiohttp.ClientHttpProxyError) as err:
            await http.get(f"https://{PROTECTED}:{protected_port}/tunnel", proxy=proxy.url)
        assert err.value.status == 403
    assert protected_hits == [] and local_hits == []
    assert proxy.stats.blocked_count == 4 and proxy.stats.connections == 1


async def test_page_traffic_over_its_budget_is_cut(
    servers: tuple[int, list[str], int, list[str], int, list[str]],
) -> None:
    site_port = servers[0]
    async with PolicyProxy(parse_networks([f"{SITE}/32"]), max_bytes=50_000) as proxy, aiohttp.ClientSession() as http:
        got: tuple[int, int] | None = None
        try:
            async with http.get(f"http://{SITE}:{site_port}/big", proxy=proxy.url) as resp:
                got = (resp.status, len(await resp.read()))
        except aiohttp.ClientError:
            pass  # the connection was cut mid-body
        # never the whole body: cut mid-way, or (the client retrying the GET) refused outright
        assert got is None or got == (403, 0), got
    assert proxy.stats.over_budget
    assert proxy.stats.bytes_down <= 50_000 + 64 * 1024  # cut within one chunk of the budget
