"""The render peers of ``bench/render_throughput.py``: Crawlee's PlaywrightCrawler and scrapy-playwright.

Each runs in its own process (``python bench/render_peers.py <peer> <flavour> <pages> <out> <url>...``)
on the same URL list as Trawl's browser path, with what Trawl's browser mode uses:

- the same Chromium binary (Debian's, found by ``find_chromium``; Playwright downloads nothing) with
  Trawl's flags (``BrowserSettings.args``, a marker that finds its processes in /proc), headless;
- the same resource blocking (``BLOCKED``: image, font, media, stylesheet, aborted by resource type);
- the same wait rule: the ``load`` event, then for the XHR-fed listings ``ol.items li.item`` attached;
- the same extraction (Trawl's ``Extractor`` with ``LISTING_FIELDS`` on the rendered HTML) and check;
- ``pages`` pages at once.

What differs is stated in docs/benchmarks.md: each peer renders its pages as its docs recommend, in
one shared browser context (Trawl: one per job and identity, here one for the bench's job), with no
address policy proxy (Trawl: every connection through its context's). Every renderer, Trawl's included,
is measured the same way (:class:`Meter` over :func:`stream`): ``2 * pages`` warm-up renders, then the
clock, CPU (this process and its descendants: Playwright's driver, Chromium) and the browser's peak PSS
cover the measured pages, with ``pages`` pages in flight at both ends of the window.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from trawl.dev.jsbookstore import LISTING_FIELDS
from trawl.worker.browser import procmem
from trawl.worker.browser.settings import BrowserSettings, find_chromium
from trawl.worker.extract import ExtractOptions, Extractor

BLOCKED = ("image", "font", "media", "stylesheet")
XHR_SELECTOR = "ol.items li.item"


def cpu_by_kind(site_pid: int | None = None) -> dict[str, float]:
    """CPU seconds of this process's tree by process kind: this process (``worker``: Trawl's policy
    proxies, or the peer's crawler; Playwright's client, the extractor), Playwright's ``driver``, and
    Chromium's processes by ``--type`` (``browser``, ``gpu-process``, utilities by sub-type such as
    ``NetworkService``; ``renderers``: the renderers and the zygote that reaps them, whose reaped
    children's time moves to it when a renderer ends). ``worker`` includes the bench's memory sampler."""
    skip = set(procmem.descendants(site_pid)) if site_pid is not None else set()
    out: dict[str, float] = {}
    for p in procmem.descendants(os.getpid()):
        if p in skip:
            continue
        try:
            cmd = (procmem.PROC / str(p) / "cmdline").read_bytes().replace(b"\0", b" ").split()
        except OSError:
            continue
        if p == os.getpid():
            kind = "worker"
        elif any(a.startswith(b"--type=") for a in cmd):
            kind = next(a for a in cmd if a.startswith(b"--type=")).decode()[7:]
            if kind in ("renderer", "zygote"):
                kind = "renderers"
            elif kind == "utility":
                sub = next((a for a in cmd if a.startswith(b"--utility-sub-type=")), b"=utility")
                kind = sub.decode().rsplit(".", 1)[-1]
        elif cmd and b"chrom" in cmd[0]:
            kind = "browser"
        else:
            kind = "driver"
        out[kind] = out.get(kind, 0.0) + procmem.cpu_seconds(p)
    return out


def split_line(before: dict[str, float], after: dict[str, float], pages: int) -> str:
    """``kind=ms`` per page, the costliest first (a process that ended counts in its parent's reaped time)."""
    ms = {k: (v - before.get(k, 0.0)) / pages * 1000 for k, v in after.items()}
    return " ".join(f"{k}={v:.0f}" for k, v in sorted(ms.items(), key=lambda kv: -kv[1]) if round(v))


class Meter:
    """Counts rendered pages; times and samples the pages after the warm-up."""

    def __init__(self, total: int, warmup: int, marker: str, tail: int = 0, exclude: int | None = None) -> None:
        self.total, self.warmup, self.marker = total, warmup, marker
        self.end = total - tail  # the completion that closes the window; ``tail`` pages still run after it
        self.exclude = exclude  # a process tree not counted (the site, when it is this process's child)
        self.pages = 0
        self.t0 = self.t1 = self.cpu0 = self.cpu1 = 0.0
        self.kinds0: dict[str, float] = {}
        self.split = ""
        self.peak = 0
        self.browsers = 0  # the most browsers seen at once
        self._stop = threading.Event()
        self._extractor = Extractor(ExtractOptions.from_dict({"fields": LISTING_FIELDS}))

    def check(self, html: str | bytes, url: str) -> None:
        data = self._extractor.extract(html, url).data
        assert len(data["names"]) == 10 and len(data["prices"]) == 10, (url, data)

    def page_done(self) -> None:
        self.pages += 1
        if self.pages == self.warmup:
            self.t0, self.cpu0 = time.monotonic(), self._cpu()
            self.kinds0 = cpu_by_kind(self.exclude)
            threading.Thread(target=self._sample, daemon=True).start()
        elif self.pages == self.end:
            self.t1, self.cpu1 = time.monotonic(), self._cpu()
            self.split = split_line(self.kinds0, cpu_by_kind(self.exclude), self.end - self.warmup)
            self._stop.set()

    def _cpu(self) -> float:
        return procmem.tree_cpu_seconds(os.getpid(), exclude={self.exclude} if self.exclude is not None else None)

    def _sample(self) -> None:
        # every browser the crawler runs, summed at each sample: a crawler may run several at once
        # (Crawlee's PlaywrightCrawler did here, seen in /proc: its first one alone undercounts it)
        while not self._stop.is_set():
            pids = procmem.find_pids(self.marker)
            self.peak = max(self.peak, sum(procmem.tree_pss_bytes(pid) for pid in pids))
            self.browsers = max(self.browsers, len(pids))
            self._stop.wait(0.2)

    def result(self, name: str, concurrency: int) -> dict[str, Any]:
        measured = self.end - self.warmup
        return {
            "name": name,
            "pages": measured,
            "seconds": self.t1 - self.t0,
            "cpu": self.cpu1 - self.cpu0,
            "peak_bytes": self.peak,
            "concurrency": concurrency,
            "browsers": self.browsers,
            "split": self.split,
        }


def stream(measured: list[str], pages: int) -> list[str]:
    """The URLs one renderer loads in one go: ``2 * pages`` warm-up pages, the measured ones, and a tail of
    ``pages`` more. The window runs from the warm-up's last completion to the measured pages' last, so at
    both ends ``pages`` pages are in flight (a steady state): without the tail the window would hold the
    drain at the end and not the partial pages at the start, and undercount a page's cost."""
    return measured[: 2 * pages] + measured + measured[:pages]


def launch_options(marker: str) -> dict[str, Any]:
    """Playwright's launch arguments as Trawl's BrowserPool passes them (without its policy proxy)."""
    return {
        "executable_path": find_chromium(),
        "headless": True,
        "args": BrowserSettings().args(marker),
        "ignore_default_args": ["--enable-automation"],
        "chromium_sandbox": True,
    }


def crawlee_main(flavour: str, pages: int, urls: list[str], meter: Meter) -> dict[str, Any]:
    """PlaywrightCrawler tuned per Crawlee's docs for a known site: concurrency pinned at ``pages`` (the
    autoscaled pool otherwise backs off on a loaded machine), storage in memory, no retries, no browser
    fingerprint injection (Trawl and scrapy-playwright inject none), resources blocked by type in a
    pre-navigation hook, pages in the browser's default shared context (its default)."""
    import asyncio
    import logging
    from datetime import timedelta

    from crawlee import ConcurrencySettings, Request
    from crawlee.crawlers import PlaywrightCrawler, PlaywrightCrawlingContext, PlaywrightPreNavCrawlingContext
    from crawlee.storage_clients import MemoryStorageClient

    crawler = PlaywrightCrawler(
        browser_type="chromium",
        browser_launch_options=launch_options(meter.marker),
        headless=True,
        fingerprint_generator=None,
        goto_options={"wait_until": "load"},
        concurrency_settings=ConcurrencySettings(
            min_concurrency=pages, desired_concurrency=pages, max_concurrency=pages
        ),
        storage_client=MemoryStorageClient(),
        max_request_retries=0,
        configure_logging=False,
        status_message_logging_interval=timedelta(hours=1),
    )
    logging.getLogger("crawlee").setLevel(logging.WARNING)

    @crawler.pre_navigation_hook
    async def block(context: PlaywrightPreNavCrawlingContext) -> None:
        async def route(r: Any) -> None:
            await (r.abort("blockedbyclient") if r.request.resource_type in BLOCKED else r.continue_())

        await context.page.route("**/*", route)

    @crawler.router.default_handler
    async def handler(context: PlaywrightCrawlingContext) -> None:
        if flavour == "xhr":
            await context.page.wait_for_selector(XHR_SELECTOR, state="attached")
        meter.check(await context.page.content(), context.request.url)
        meter.page_done()

    # the same URL twice (warm-up, then measured) needs its own unique key each time
    requests = [Request.from_url(u, unique_key=f"{i}:{u}") for i, u in enumerate(urls)]
    asyncio.run(crawler.run(requests))
    return meter.result("crawlee-playwright", pages)


def scrapy_main(flavour: str, pages: int, urls: list[str], meter: Meter) -> dict[str, Any]:
    """scrapy-playwright as its README sets it up: its download handler on Scrapy's asyncio reactor,
    CONCURRENT_REQUESTS = ``pages`` (and as many pages per context), PLAYWRIGHT_ABORT_REQUEST for the
    blocking, a PageMethod for the selector wait, robots.txt, retries and cookies off."""
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy_playwright.page import PageMethod

    methods = [PageMethod("wait_for_selector", XHR_SELECTOR, state="attached")] if flavour == "xhr" else []

    class RenderSpider(scrapy.Spider):
        name = "render"

        async def start(self) -> Any:
            for u in urls:
                meta = {"playwright": True, "playwright_page_methods": methods}
                yield scrapy.Request(u, meta=meta, dont_filter=True)

        def parse(self, response: Any) -> None:
            meter.check(response.body, response.url)
            meter.page_done()

    process = CrawlerProcess(
        settings={
            "DOWNLOAD_HANDLERS": {
                "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
                "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
            },
            "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
            "PLAYWRIGHT_BROWSER_TYPE": "chromium",
            "PLAYWRIGHT_LAUNCH_OPTIONS": launch_options(meter.marker),
            "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": pages,
            "PLAYWRIGHT_ABORT_REQUEST": lambda req: req.resource_type in BLOCKED,
            "CONCURRENT_REQUESTS": pages,
            "CONCURRENT_REQUESTS_PER_DOMAIN": pages,
            "ROBOTSTXT_OBEY": False,
            "RETRY_ENABLED": False,
            "COOKIES_ENABLED": False,
            "TELNETCONSOLE_ENABLED": False,
            "LOG_LEVEL": "WARNING",
        }
    )
    process.crawl(RenderSpider)
    process.start()
    return meter.result("scrapy-playwright", pages)


def main() -> None:
    peer, flavour, pages_arg, out = sys.argv[1:5]
    pages = int(pages_arg)
    measured = sys.argv[5:]
    urls = stream(measured, pages)
    meter = Meter(len(urls), 2 * pages, f"bench-{uuid.uuid4().hex[:8]}", tail=pages)
    run = crawlee_main if peer == "crawlee" else scrapy_main
    result = run(flavour, pages, urls, meter)
    if meter.pages != len(urls):
        raise SystemExit(f"{peer}: {meter.pages} of {len(urls)} pages rendered")
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
