"""Fetching through real upstream proxies (tinyproxy with Basic auth, Dante's SOCKS5 server) on loopback:
pages go through them, their failures are theirs, and the address guard holds through them — a blocked
target is refused before the proxy sees a byte of it (its log says so)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from trawl.api.policies import FailureClass
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev.bookstore import Bookstore
from trawl.dev.procs import free_port
from trawl.dev.proxy_servers import Danted, TinyProxy
from trawl.egress.addresses import parse_networks
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.fetch import Fetcher, FetchError
from trawl.worker.pipeline import MAX_DEFERRALS
from trawl.worker.proxies import ProxyGroup, parse_proxy_list
from trawl.worker.runner import Worker, WorkerConfig
from worker_runs import run_to_end

ALLOWED = parse_networks(["127.0.0.2/32"])  # the site; 127.0.0.1 (where the proxies listen) stays blocked
PASSWORD = "s3cret-Proxy-pw"
PREFIX = "trawl:{test/proxies}"


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


# ------------------------------------------------------------------ the real worker, the pool's Secret


async def _run_job(redis: Any, job: dict[str, Any], pool: dict[str, Any]) -> tuple[Worker, str]:
    """One job to its end on a worker in this process; the worker and the job's id."""
    spec = ScrapeJobSpec.model_validate({"pool": "p", "politeness": {"requestsPerSecond": 1000}, **job})
    pool_spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://unused"}, **pool})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, spec, pool_spec))
    await queue.enqueue(job_id, spec.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config = WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=4, allowed_cidrs=["127.0.0.2/32"])
    worker = Worker(config, queue, redis, Keys(PREFIX))
    await run_to_end(worker, queue, job_id, 60, 30)
    return worker, job_id


async def _redis_text(redis: Any) -> str:
    """Every value of every key, as text: what a dump of the database would show."""
    parts: list[str] = []
    async for key in redis.scan_iter(count=1000):
        kind = (await redis.type(key)).decode()
        reader = {
            "string": lambda k: redis.get(k),
            "hash": lambda k: redis.hgetall(k),
            "list": lambda k: redis.lrange(k, 0, -1),
            "set": lambda k: redis.smembers(k),
            "zset": lambda k: redis.zrange(k, 0, -1, withscores=True),
            "stream": lambda k: redis.xrange(k),
        }.get(kind)
        parts.append(f"{key!r} {kind} {await reader(key) if reader else ''!r}")
    return "\n".join(parts)


async def test_worker_fetches_through_the_pools_default_group_and_never_shows_the_password(
    site: Bookstore,
    redis_client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with (
        TinyProxy(username="scraper", password=PASSWORD) as first,
        TinyProxy(username="scraper", password=PASSWORD) as second,
    ):
        (tmp_path / "proxies").mkdir()
        (tmp_path / "proxies" / "urls").write_text(
            f"{first.url('scraper', PASSWORD)}\n{second.url('scraper', PASSWORD)}\n"
        )
        monkeypatch.setenv("TRAWL_SECRETS_DIR", str(tmp_path))
        pool = {
            "worker": {"secrets": ["proxies"]},
            "proxies": {"groups": [{"name": "dc", "secretRef": {"name": "proxies", "key": "urls"}, "default": True}]},
        }
        urls = [site.product_url(i) for i in range(1, 7)] + [f"{site.url}/hostile/redirect/loopback"]
        worker, job_id = await _run_job(redis_client, {"urls": urls, "retry": {"maxAttempts": 1}}, pool)
        stats = await Queue(redis_client, PREFIX).job_stats(job_id)
        assert stats.succeeded == 6 and stats.dead == 1, stats  # the redirect to loopback refused
        assert len(_requests(first)) + len(_requests(second)) == 7
        assert _requests(first) and _requests(second)  # both proxies used
        assert not any("127.0.0.1" in line for line in _requests(first) + _requests(second))
    metrics = generate_latest(worker.metrics.registry).decode()
    assert 'trawl_worker_proxy_requests_total{group="dc",outcome="ok",proxy="127.0.0.1:' in metrics
    assert 'outcome="BlockedAddress"' in metrics
    assert PASSWORD not in metrics
    assert PASSWORD not in caplog.text and PASSWORD not in await _redis_text(redis_client)
    assert "scraper:" not in caplog.text


async def test_a_failing_proxy_gives_the_task_back_a_bounded_number_of_times(
    site: Bookstore, redis_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()  # nothing listens there: the proxy refuses every connection
    (tmp_path / "proxies").mkdir()
    (tmp_path / "proxies" / "urls").write_text(f"http://scraper:{PASSWORD}@127.0.0.1:{port}\n")
    monkeypatch.setenv("TRAWL_SECRETS_DIR", str(tmp_path))
    pool = {
        "worker": {"secrets": ["proxies"]},
        "proxies": {"groups": [{"name": "broken", "secretRef": {"name": "proxies", "key": "urls"}}]},
    }
    job = {"urls": [site.product_url(1)], "retry": {"maxAttempts": 1}, "proxy": {"group": "broken"}}
    worker, job_id = await _run_job(redis_client, job, pool)
    assert (await Queue(redis_client, PREFIX).job_stats(job_id)).dead == 1
    registry = worker.metrics.registry
    # Given back MAX_DEFERRALS times without spending an attempt, then the one attempt is spent.
    assert registry.get_sample_value("trawl_worker_rate_limit_deferrals_total", {"reason": "proxy"}) == MAX_DEFERRALS
    labels = {"group": "broken", "proxy": f"127.0.0.1:{port}", "outcome": "proxy_error"}
    assert registry.get_sample_value("trawl_worker_proxy_requests_total", labels) == MAX_DEFERRALS + 1
    assert PASSWORD not in await _redis_text(redis_client)
