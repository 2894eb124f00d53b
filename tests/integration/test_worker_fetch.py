"""The safe fetcher against the real bookstore fixture site (on 127.0.0.2) and its hostile endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from trawl.api.policies import FailureClass
from trawl.dev.bookstore import Bookstore
from trawl.egress.addresses import parse_networks
from trawl.worker.fetch import Fetcher, FetchError, FetchLimits

# The site listens on 127.0.0.2 and only that address is allowed: 127.0.0.1 (and localhost) stay blocked.
ALLOWED = parse_networks(["127.0.0.2/32"])


async def _fetch_error(url: str, limits: FetchLimits = FetchLimits()) -> FetchError:
    async with Fetcher(allowed=ALLOWED) as fetcher:
        with pytest.raises(FetchError) as err:
            await fetcher.fetch(url, limits=limits)
    return err.value


async def test_fetches_a_page(site: Bookstore) -> None:
    async with Fetcher(allowed=ALLOWED) as fetcher:
        result = await fetcher.fetch(site.product_url(1))
    assert result.status == 200 and b"<h1>" in result.body and result.content_type == "text/html"


async def test_loopback_site_is_refused_without_allow_list(site: Bookstore) -> None:
    async with Fetcher() as fetcher:
        with pytest.raises(FetchError) as err:
            await fetcher.fetch(site.product_url(1))
    assert err.value.failure_class == FailureClass.BLOCKED_ADDRESS


@pytest.mark.parametrize(
    ("kind", "target"),
    [
        ("loopback", "127.0.0.1"),
        ("metadata", "169.254.169.254"),
        ("mapped", "::ffff:169.254.169.254"),
        ("private", "10.0.0.1"),
        ("localhost", "localhost"),
        ("localhost-dot", "localhost."),
    ],
)
async def test_redirects_to_internal_addresses_are_refused(site: Bookstore, kind: str, target: str) -> None:
    started = time.monotonic()
    error = await _fetch_error(f"{site.url}/hostile/redirect/{kind}")
    assert error.failure_class == FailureClass.BLOCKED_ADDRESS, error
    assert target.split(":")[-1] in str(error) or target in str(error)
    assert time.monotonic() - started < 5  # refused before any connection attempt, not timed out
    # the redirect itself was fetched from the allowed site; nothing reached the blocked target
    assert any(e.path == f"/hostile/redirect/{kind}" for e in site.entries())


async def test_redirect_within_allowed_site_is_followed(site: Bookstore) -> None:
    async with Fetcher(allowed=ALLOWED) as fetcher:
        result = await fetcher.fetch(f"{site.url}/hostile/redirect/to?url=/product/2.html")
    assert result.final_url == site.product_url(2) and result.redirects == [site.product_url(2)]


async def test_redirect_cap(site: Bookstore) -> None:
    loop = f"{site.url}/hostile/redirect/to?url=/hostile/redirect/to%3Furl%3D/"
    error = await _fetch_error(loop, FetchLimits(max_redirects=0))
    assert "redirects" in error.message


@pytest.mark.parametrize("kind", ["gzip", "br"])
async def test_decompression_bomb_is_cut_at_the_cap(site: Bookstore, kind: str) -> None:
    error = await _fetch_error(f"{site.url}/hostile/bomb/{kind}", FetchLimits(max_bytes=2 * 1024 * 1024))
    assert error.failure_class == FailureClass.TOO_LARGE
    assert "decompression" in error.message


@pytest.mark.parametrize("with_length", [False, True])
async def test_oversized_body_is_cut_at_the_cap(site: Bookstore, with_length: bool) -> None:
    url = f"{site.url}/hostile/huge" + ("?length=1" if with_length else "")
    started = time.monotonic()
    error = await _fetch_error(url, FetchLimits(max_bytes=1024 * 1024))
    assert error.failure_class == FailureClass.TOO_LARGE
    assert time.monotonic() - started < 5


async def test_one_byte_a_second_times_out(site: Bookstore) -> None:
    started = time.monotonic()
    error = await _fetch_error(f"{site.url}/hostile/drip", FetchLimits(total_timeout=2.5, read_timeout=2.5))
    elapsed = time.monotonic() - started
    assert error.failure_class == FailureClass.TIMEOUT
    assert 2.0 <= elapsed < 4.0


async def test_status_classes(site: Bookstore) -> None:
    assert (await _fetch_error(f"{site.url}/hostile/404")).failure_class == FailureClass.HTTP_4XX
    error = await _fetch_error(f"{site.url}/hostile/429?id=fetch-test")
    assert error.failure_class == FailureClass.HTTP_429 and error.retry_after == 2.0
    assert (await _fetch_error(f"{site.url}/hostile/503?id=fetch-test&fail=1")).failure_class == FailureClass.HTTP_5XX


async def test_non_http_schemes_are_invalid() -> None:
    error = await _fetch_error("file:///etc/passwd")
    assert error.failure_class == FailureClass.INVALID_URL


@pytest.mark.parametrize(
    "host", ["2130706433", "127.1", "0x7f.0.0.1", "017700000001", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"]
)
async def test_numeric_spellings_of_loopback_are_refused(site: Bookstore, host: str) -> None:
    target = f"http://{host}:{site.port}/"
    error = await _fetch_error(f"{site.url}/hostile/redirect/to?url={target}")
    assert error.failure_class == FailureClass.BLOCKED_ADDRESS, error


async def test_credentials_never_reach_a_second_origin(site: Bookstore) -> None:
    secret = {"Authorization": "Bearer s3cret", "Cookie": "session=s3cret", "X-Api-Key": "s3cret"}
    with Bookstore(host="127.0.0.2", categories=1, books_per_category=1) as other:
        async with Fetcher(allowed=ALLOWED) as fetcher:
            same = await fetcher.fetch(f"{site.url}/hostile/redirect/to?url=/hostile/headers", headers=secret)
            cross = await fetcher.fetch(
                f"{site.url}/hostile/redirect/to?url={other.url}/hostile/headers", headers=secret
            )
    assert same.redirects and cross.redirects and cross.final_url.startswith(other.url)
    got_same, got_cross = json.loads(same.body), json.loads(cross.body)
    assert {k: got_same.get(k) for k in secret} == secret  # the job's own origin gets its headers
    assert not set(secret) & set(got_cross)  # another origin gets none of them
    assert got_cross["User-Agent"] == got_same["User-Agent"]


@contextlib.asynccontextmanager
async def _peer_logging_site() -> AsyncIterator[tuple[str, list[tuple[str, int]]]]:
    """A site on 127.0.0.2 that logs the client address and port of each request (one per connection):
    ``/p/moved`` redirects to ``/p/0``, a request with ``If-None-Match: "v1"`` gets a 304."""
    peers: list[tuple[str, int]] = []

    async def page(request: web.Request) -> web.Response:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername")[:2])
        if request.match_info["n"] == "moved":
            raise web.HTTPFound("/p/0")
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"'})
        await asyncio.sleep(0.01)
        return web.Response(text="<html><h1>p</h1></html>", content_type="text/html", headers={"ETag": '"v1"'})

    app = web.Application()
    app.router.add_get("/p/{n}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.2", 0).start()
    try:
        yield f"http://127.0.0.2:{runner.addresses[0][1]}", peers
    finally:
        await runner.cleanup()


async def test_a_hosts_pages_reuse_its_connections() -> None:
    """Keep-alive survives the address checks: the checked connection goes back to the pool and the host's
    next pages (and a redirect within it) come on it, one connection per request in flight at once (issue
    37: a profile read coroutine resumptions as connections opened; bench/many_hosts.py counts them)."""
    async with _peer_logging_site() as (url, peers), Fetcher(allowed=ALLOWED) as fetcher:
        for n in range(20):
            assert (await fetcher.fetch(f"{url}/p/{n}")).status == 200
        moved = await fetcher.fetch(f"{url}/p/moved")
        assert moved.redirects == [f"{url}/p/0"]
        assert len(peers) == 22 and len(set(peers)) == 1, set(peers)

        async def one_at_a_time(k: int) -> None:
            for n in range(10):
                await fetcher.fetch(f"{url}/p/{k}-{n}")

        await asyncio.gather(one_at_a_time(1), one_at_a_time(2))
        assert len(peers) == 42 and len(set(peers)) <= 2, set(peers)


async def test_a_not_modified_answer_keeps_no_response_alive() -> None:
    """A 304's result is built from its response and the response is let go (a cache on that function kept
    the last 4,096 responses of a refresh crawl alive)."""
    async with _peer_logging_site() as (url, _), Fetcher(allowed=ALLOWED) as fetcher:
        result = await fetcher.fetch(f"{url}/p/1", conditional={"If-None-Match": '"v1"'})
        assert result.status == 304 and result.headers.get("Etag") == '"v1"'
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, aiohttp.ClientResponse)]
