"""spec.render: validation, what reaches the worker spec, Chromium's command line, the proxy's parsing."""

from __future__ import annotations

import pydantic
import pytest

from trawl.api.render import RenderMode, RenderWait
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.jobspec.wire import build_worker_spec
from trawl.worker.browser.proxy import split_host_port
from trawl.worker.browser.settings import BASE_ARGS, BrowserSettings
from trawl.worker.jobsettings import parse_worker_spec


def job(render: dict[str, object] | None) -> ScrapeJobSpec:
    spec: dict[str, object] = {"pool": "p", "urls": ["https://shop.test/"]}
    if render is not None:
        spec["render"] = render
    return ScrapeJobSpec.model_validate(spec)


def test_browser_render_reaches_the_worker_and_fetch_stays_the_plain_path() -> None:
    rendered = parse_worker_spec(
        build_worker_spec(
            job({"mode": "Browser", "waitFor": "Selector", "selector": "ol li", "screenshot": True}), None
        )
    )
    assert rendered.render is not None
    assert (rendered.render.mode, rendered.render.wait_for, rendered.render.selector) == (
        RenderMode.BROWSER,
        RenderWait.SELECTOR,
        "ol li",
    )
    assert rendered.render.screenshot and rendered.render.timeout_seconds == 30
    # no render, or mode Fetch, is the plain fetch path: nothing browser-related reaches the worker
    for plain in (None, {"mode": "Fetch", "waitFor": "NetworkIdle"}):
        built = build_worker_spec(job(plain), None)
        assert built["render"] is None and parse_worker_spec(built).render is None
    # a spec written before render existed still parses
    old = build_worker_spec(job(None), None)
    del old["render"]
    assert parse_worker_spec(old).render is None


def test_selector_wait_needs_a_selector_and_limits_hold() -> None:
    with pytest.raises(pydantic.ValidationError, match="selector is required"):
        job({"mode": "Browser", "waitFor": "Selector"})
    with pytest.raises(pydantic.ValidationError):
        job({"mode": "Browser", "timeoutSeconds": 0})
    with pytest.raises(pydantic.ValidationError):
        job({"mode": "Browser", "blockResources": ["script"]})  # scripts are the point of rendering


def test_chromium_flags_keep_it_quiet_and_sandboxed_unless_told() -> None:
    args = BrowserSettings(no_sandbox=False).args("m1")
    for flag in ("--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic"):
        assert flag in args
    assert "--no-sandbox" not in args and args[-1] == "--trawl-browser=m1"
    assert "--no-sandbox" in BrowserSettings(no_sandbox=True).args("m2")
    assert "--no-sandbox" in BrowserSettings(no_sandbox=False).args("m3", no_sandbox=True)
    assert not any(a.startswith("--proxy-bypass") for a in BASE_ARGS)  # loopback is never exempt


def test_settings_from_the_environment() -> None:
    s = BrowserSettings.from_env(
        {"TRAWL_BROWSER_PAGES": "3", "TRAWL_BROWSER_MEMORY_MIB": "512", "TRAWL_BROWSER_NO_SANDBOX": "false"}
    )
    assert (s.pages_per_browser, s.memory_limit_bytes, s.no_sandbox) == (3, 512 * 2**20, False)
    assert BrowserSettings.from_env({}).no_sandbox is None


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("shop.test:443", ("shop.test", 443)),
        ("shop.test", ("shop.test", 80)),
        ("[::1]:8080", ("::1", 8080)),
        ("[fe80::1]", ("fe80::1", 80)),
        ("169.254.169.254:80", ("169.254.169.254", 80)),
    ],
)
def test_proxy_authority_parsing(authority: str, expected: tuple[str, int]) -> None:
    assert split_host_port(authority, 80) == expected


@pytest.mark.parametrize("bad", ["", ":80", "host:0", "host:99999", "host:x", "[::1"])
def test_proxy_rejects_junk_authorities(bad: str) -> None:
    with pytest.raises(ValueError):
        split_host_port(bad, 80)


def test_a_browser_pool_passes_its_settings_to_the_workers() -> None:
    from trawl.api.scrapepool import ScrapePoolSpec
    from trawl.operator.pool.deployment import worker_deployment

    def env_of(worker: dict[str, object]) -> dict[str, str]:
        spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379"}, "worker": worker})
        dep = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=spec, replicas=1)
        [container] = dep["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    browser = env_of({"image": "trawl-browser:1", "browser": {"pagesPerBrowser": 4, "memoryLimitMiB": 1536}})
    assert (browser["TRAWL_BROWSER_PAGES"], browser["TRAWL_BROWSER_MEMORY_MIB"]) == ("4", "1536")
    plain = env_of({})
    assert not any(name.startswith("TRAWL_BROWSER_") for name in plain)


def test_only_matching_urls_are_rendered() -> None:
    spec = job({"mode": "Browser", "onlyMatching": r"/category/[a-z]+/page-\d+\.html$"}).render
    assert spec is not None
    assert spec.applies("https://shop.test/category/travel/page-2.html")
    assert not spec.applies("https://shop.test/product/7.html")  # fetched plainly
    every = job({"mode": "Browser"}).render
    assert every is not None and every.applies("https://shop.test/product/7.html")
    fetch = job({"mode": "Fetch", "onlyMatching": "/"}).render
    assert fetch is not None and not fetch.applies("https://shop.test/")
    with pytest.raises(pydantic.ValidationError, match="not a valid regular expression"):
        job({"mode": "Browser", "onlyMatching": "("})
