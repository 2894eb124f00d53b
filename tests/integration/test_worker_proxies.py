"""Fetching through real upstream proxies (tinyproxy with Basic auth, Dante's SOCKS5 server) on loopback:
pages go through them, their failures are theirs, and the address guard holds through them — a blocked
target is refused before the proxy sees a byte of it (its log says so)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trawl.api.policies import FailureClass
from trawl.dev.bookstore import Bookstore
from trawl.dev.procs import free_port
from trawl.dev.proxy_servers import Danted, TinyProxy
from trawl.egress.addresses import parse_networks
from trawl.worker.fetch import Fetcher, FetchError
from trawl.worker.proxies import ProxyGroup, parse_proxy_list

ALLOWED = parse_networks(["127.0.0.2/32"])  # the site; 127.0.0.1 (where the proxies listen) stays blocked
PASSWORD = "s3cret-Proxy-pw"


@pytest.fixture
def tiny() -> Iterator[TinyProxy]:
    with TinyProxy(username="scraper", password=PASSWORD) as proxy:
        yield proxy


@pytest.fixture
def socks() -> Iterator[Danted]:
    with Danted() as proxy:
        yield proxy


def _requests(proxy: TinyProxy) -> list[str]:
    return [line for line in proxy.log().splitlines() if "Request (file descriptor" in line]


async def test_page_through_http_proxy_with_basic_auth(site: Bookstore, tiny: TinyProxy) -> None:
    (endpoint,) = parse_proxy_list(tiny.url("scraper", PASSWORD))
    async with Fetcher(allowed=ALLOWED) as fetcher:
        result = await fetcher.fetch(site.product_url(1), proxy=endpoint)
    assert result.status == 200 and b"<h1>" in result.body
    assert result.final_url == site.product_url(1)
    assert any("127.0.0.2" in line and "/product/1" in line for line in _requests(tiny)), tiny.log()


async def test_page_through_socks5_proxy(site: Bookstore, socks: Danted) -> None:
    (endpoint,) = parse_proxy_list(socks.url())
    async with Fetcher(allowed=ALLOWED) as fetcher:
        result = await fetcher.fetch(site.product_url(2), proxy=endpoint)
    assert result.status == 200 and b"<h1>" in result.body
    port = site.url.rsplit(":", 1)[1]
    assert f"127.0.0.2.{port}" in socks.log(), socks.log()  # Dante logs the destination address.port


@pytest.mark.parametrize("case", ["wrong-on-connect", "missing-on-plain-http"])
async def test_refused_credentials_are_the_proxys_fault(site: Bookstore, tiny: TinyProxy, case: str) -> None:
    # tinyproxy answers wrong credentials with 401 (missing ones with 407): on a CONNECT (an https target)
    # that is the proxy's answer whatever the code; on plain http a 401 reads as the site's (docs/security.md).
    if case == "wrong-on-connect":
        (endpoint,) = parse_proxy_list(tiny.url("scraper", "wrong-" + PASSWORD))
        url = site.product_url(1).replace("http://", "https://")
    else:
        (endpoint,) = parse_proxy_list(tiny.url())
        url = site.product_url(1)
    async with Fetcher(allowed=ALLOWED) as fetcher:
        with pytest.raises(FetchError) as err:
            await fetcher.fetch(url, proxy=endpoint)
    assert err.value.proxy_fault and err.value.failure_class == FailureClass.CONNECTION, err.value
    assert f"127.0.0.1:{tiny.port}" in str(err.value)
    assert PASSWORD not in str(err.value) and PASSWORD not in repr(err.value) and PASSWORD not in repr(endpoint)


@pytest.mark.parametrize("scheme", ["http", "socks5"])
async def test_unreachable_proxy_is_the_proxys_fault(site: Bookstore, scheme: str) -> None:
    (endpoint,) = parse_proxy_list(f"{scheme}://user:{PASSWORD}@127.0.0.1:{free_port()}")
    async with Fetcher(allowed=ALLOWED) as fetcher:
        with pytest.raises(FetchError) as err:
            await fetcher.fetch(site.product_url(1), proxy=endpoint)
    assert err.value.proxy_fault and err.value.failure_class == FailureClass.CONNECTION, err.value
    assert PASSWORD not in str(err.value)


@pytest.mark.parametrize("kind", ["loopback", "localhost", "metadata", "private"])
async def test_redirect_to_a_blocked_address_never_reaches_the_proxy(
    site: Bookstore, tiny: TinyProxy, kind: str
) -> None:
    (endpoint,) = parse_proxy_list(tiny.url("scraper", PASSWORD))
    async with Fetcher(allowed=ALLOWED) as fetcher:
        with pytest.raises(FetchError) as err:
            await fetcher.fetch(f"{site.url}/hostile/redirect/{kind}", proxy=endpoint)
    assert err.value.failure_class == FailureClass.BLOCKED_ADDRESS and not err.value.proxy_fault, err.value
    requests = _requests(tiny)
    assert len(requests) == 1 and f"/hostile/redirect/{kind}" in requests[0], requests  # the redirect only


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:{port}/", "http://localhost:{port}/", "http://[::1]:{port}/", "https://127.0.0.1:{port}/"],
)
@pytest.mark.parametrize("kind", ["http", "socks5"])
async def test_blocked_target_is_refused_before_the_proxy(tiny: TinyProxy, socks: Danted, url: str, kind: str) -> None:
    # The protected service: the proxy itself listens on loopback, so a job asking for it is the attack.
    proxy = tiny if kind == "http" else socks
    (endpoint,) = parse_proxy_list(tiny.url("scraper", PASSWORD) if kind == "http" else socks.url())
    async with Fetcher(allowed=ALLOWED) as fetcher:
        with pytest.raises(FetchError) as err:
            await fetcher.fetch(url.format(port=proxy.port), proxy=endpoint)
    assert err.value.failure_class == FailureClass.BLOCKED_ADDRESS, err.value
    log = proxy.log()
    assert "Request (file descriptor" not in log and "tcp/connect" not in log, log  # nothing asked of it


async def test_rotation_spreads_requests_over_the_group(site: Bookstore) -> None:
    with TinyProxy() as first, TinyProxy() as second:
        group = ProxyGroup("pool", parse_proxy_list(f"{first.url()}\n{second.url()}\n"), max_per_proxy=2)
        async with Fetcher(allowed=ALLOWED) as fetcher:
            for i in range(4):
                async with group.use(wait=5) as endpoint:
                    await fetcher.fetch(site.product_url(i + 1), proxy=endpoint)
        assert len(_requests(first)) == 2 and len(_requests(second)) == 2, (first.log(), second.log())
        assert group.in_use == [0, 0]
