"""Proxies, pure parts: the pool's groups and their validation, which group a job goes through (never an
address of its own), the proxy list a Secret holds (credentials kept out of every text), and the choice of
the least busy proxy, round robin among equals, with a bounded wait."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.jobspec.wire import build_worker_spec
from trawl.operator.job.reconcile import admit
from trawl.operator.problems import Problem
from trawl.worker.proxies import (
    ProxyBusy,
    ProxyConfigError,
    ProxyDirectory,
    ProxyGroup,
    parse_proxy_list,
    pick,
)

REDIS = {"url": "redis://r:6379/0"}
URLS = ["https://shop.example/a"]
PASSWORD = "hunter2-Pw"


def _job(**spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "shop", "urls": URLS, **spec})


def _pool(*groups: dict[str, Any]) -> ScrapePoolSpec:
    secrets = sorted({g["secretRef"]["name"] for g in groups})
    return ScrapePoolSpec.model_validate(
        {"redis": REDIS, "worker": {"secrets": secrets}, "proxies": {"groups": list(groups)}}
    )


def _group(name: str, default: bool = False) -> dict[str, Any]:
    return {"name": name, "secretRef": {"name": "proxies", "key": name}, "default": default}


def test_least_in_use_round_robin_among_equals() -> None:
    assert pick([0, 0, 0], 2, cursor=0) == 0
    assert pick([0, 0, 0], 2, cursor=1) == 1
    assert pick([1, 0, 1], 2, cursor=0) == 1
    assert pick([2, 2, 1], 2, cursor=0) == 2
    assert pick([2, 2], 2, cursor=0) is None
    assert pick([], 2, cursor=0) is None


def test_a_preferred_proxy_is_kept_while_it_has_room() -> None:  # what a sticky session will ask
    assert pick([1, 0], 2, cursor=1, prefer=0) == 0
    assert pick([2, 0], 2, cursor=0, prefer=0) == 1


async def test_group_rotates_and_waits_bounded_when_full() -> None:
    group = ProxyGroup("g", parse_proxy_list("http://a:1\nhttp://b:2\n"), max_per_proxy=1)
    async with group.use(wait=1) as first, group.use(wait=1) as second:
        assert {first.label, second.label} == {"a:1", "b:2"}
        with pytest.raises(ProxyBusy):
            async with group.use(wait=0.05):
                pass
    assert group.in_use == [0, 0]

    async def hold() -> None:
        async with group.use(wait=1), group.use(wait=1):
            await asyncio.sleep(0.05)

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    async with group.use(wait=10) as freed:  # waits for the holder to give one back
        assert freed.label in ("a:1", "b:2")
    await holder


def test_proxy_list_parses_and_hides_credentials() -> None:
    text = f"# pool A\n\nhttp://user:{PASSWORD}@proxy.example:3128\nsocks5://u%40x:{PASSWORD}@[2001:db8::1]:1080\n"
    http, socks = parse_proxy_list(text)
    assert (http.scheme, http.host, http.port, http.username, http.password) == (
        "http",
        "proxy.example",
        3128,
        "user",
        PASSWORD,
    )
    assert socks.username == "u@x" and socks.label == "[2001:db8::1]:1080"
    for endpoint in (http, socks):
        assert PASSWORD not in repr(endpoint) and PASSWORD not in endpoint.label + endpoint.bare_url


@pytest.mark.parametrize("line", [f"ftp://u:{PASSWORD}@h:21", f"http://u:{PASSWORD}@h", f"http://u:{PASSWORD}@:80"])
def test_a_bad_line_is_refused_without_echoing_it(line: str) -> None:
    with pytest.raises(ProxyConfigError) as err:
        parse_proxy_list(line)
    assert PASSWORD not in str(err.value) and "line 1" in str(err.value)


def test_directory_reads_the_mounted_secret(tmp_path: Path) -> None:
    (tmp_path / "proxies").mkdir()
    (tmp_path / "proxies" / "res").write_text(f"http://u:{PASSWORD}@p1:8080\nhttp://u:{PASSWORD}@p2:8080\n")
    directory = ProxyDirectory({"TRAWL_SECRETS_DIR": str(tmp_path)})
    route = {"group": "res", "secret": {"name": "proxies", "key": "res"}, "max_per_proxy": 3}
    group = directory.group(route)
    assert [e.label for e in group.endpoints] == ["p1:8080", "p2:8080"] and group.max_per_proxy == 3
    assert directory.group(route) is group


def test_job_group_else_pool_default_else_direct() -> None:
    pool = _pool(_group("datacenter"), _group("residential", default=True))
    route = build_worker_spec(_job(), pool)["proxy"]
    assert route == {"group": "residential", "secret": {"name": "proxies", "key": "residential"}, "max_per_proxy": 8}
    assert build_worker_spec(_job(proxy={"group": "datacenter"}), pool)["proxy"]["group"] == "datacenter"
    assert build_worker_spec(_job(proxy={"group": "none"}), pool)["proxy"] is None
    assert build_worker_spec(_job(), _pool(_group("datacenter")))["proxy"] is None
    assert build_worker_spec(_job(), None)["proxy"] is None


def test_the_wire_spec_holds_a_reference_never_an_address() -> None:
    spec = build_worker_spec(_job(proxy={"group": "datacenter"}), _pool(_group("datacenter")))
    text = json.dumps(spec)
    assert "http://" not in text.replace("https://shop.example/a", "") and "socks5" not in text


def test_unknown_group_is_refused_at_admission() -> None:
    problem = admit("uid", _job(proxy={"group": "elsewhere"}), _pool(_group("datacenter")))
    assert isinstance(problem, Problem) and problem.reason == "UnknownProxyGroup"
    assert "'elsewhere'" in problem.message and "datacenter" in problem.message
    assert isinstance(
        admit("uid", _job(proxy={"group": "elsewhere"}), ScrapePoolSpec.model_validate({"redis": REDIS})), Problem
    )
    assert not isinstance(admit("uid", _job(proxy={"group": "none"}), _pool(_group("datacenter"))), Problem)


@pytest.mark.parametrize(
    ("proxy", "why"),
    [({"group": "http://evil:3128"}, "pattern"), ({"group": "a", "url": "http://evil:3128"}, "xtra")],
)
def test_a_job_cannot_name_an_address(proxy: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        _job(proxy=proxy)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (
            {"worker": {"secrets": ["proxies"]}, "proxies": {"groups": [_group("a", True), _group("b", True)]}},
            "at most one",
        ),
        ({"worker": {"secrets": ["proxies"]}, "proxies": {"groups": [_group("a"), _group("a")]}}, "unique"),
        ({"worker": {"secrets": ["proxies"]}, "proxies": {"groups": [_group("none")]}}, "reserved"),
        ({"proxies": {"groups": [_group("a")]}}, "spec.worker.secrets does not list"),
    ],
)
def test_pool_proxy_groups_are_validated(spec: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        ScrapePoolSpec.model_validate({"redis": REDIS, **spec})
