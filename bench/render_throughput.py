#!/usr/bin/env python3
"""Render throughput: pages/s and memory of the browser path against the static fetch path, same site.

The site is ``trawl.dev.jsbookstore`` in its own process on a free loopback port: the bookstore's
listing pages (10 products each) served three ways — static HTML, a list built by an inline script,
and a list filled from an XHR. One worker process's two load paths are measured on them, with the
same extraction rules (``LISTING_FIELDS``) and the same checks that every page yields its 10 items:

(a) fetch:  ``Fetcher`` (the SSRF-safe aiohttp client) + ``Extractor`` on the static listings,
            ``--concurrency`` pages at once;
(b) render: ``BrowserPool`` (Debian's Chromium via Playwright, the pages of one job sharing a context,
            every connection through its policy proxy) + the same ``Extractor``, ``--pages`` pages at
            once, on the script-built listings (waitFor Load) and on the XHR-fed ones (waitFor Selector);
            ``--context-per-page`` renders each page in a context of its own (as before issue 38).
            The extraction's own cost per rendered page is printed (``extract_ms/page``).

CPU: seconds of user + system time per page, of this process and its descendants (Playwright's
driver, every Chromium process; reaped renderers count through their parent), the site excluded. On
a shared machine pages/s follows the load; CPU per page does not, so the ratio to compare is that one.
Every renderer (Trawl's and each peer's) is measured the same way, by ``render_peers.Meter`` over
``render_peers.stream``: warm-up pages, then a window from the warm-up's last completion to the measured
pages' last with as many pages in flight at its end as at its start (a tail of pages follows).

(c) peers: Crawlee's ``PlaywrightCrawler`` and scrapy-playwright (``bench/render_peers.py``, each in its
            own process) on the same two flavours, with the same Chromium binary and flags, the same
            resource blocking (image, font, media, stylesheet; also set on Trawl's RenderSpec), the same
            wait rule, extraction and check, ``--pages`` pages at once. Compared on pages/s per core (pages
            per CPU second of the renderer's processes) and memory per concurrent page (the browser's peak
            PSS / pages at once); the last line gives Trawl's ratios to each (``--no-peers``: Trawl only).

The queue, politeness and sinks are left out: they are the same for both paths. Memory: PSS of the
browser's processes (browser, zygote, renderers, utilities) idle after a warm-up and at its peak
while rendering; per context = (peak - idle) / pages. The worker process's own RSS is printed too.

    .venv/bin/python bench/render_throughput.py            # 400 listings per path
    .venv/bin/python bench/render_throughput.py --quick    # 60 listings per path
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from render_peers import BLOCKED, XHR_SELECTOR, Meter, stream
from trawl.api.render import RenderSpec
from trawl.dev import procs
from trawl.dev.bookstore import Renderer, catalog
from trawl.dev.jsbookstore import LISTING_FIELDS, listing_paths
from trawl.egress.addresses import parse_networks
from trawl.worker.browser import procmem
from trawl.worker.browser.pool import BrowserPool
from trawl.worker.browser.settings import BrowserSettings, find_chromium
from trawl.worker.extract import ExtractOptions, Extractor
from trawl.worker.fetch import Fetcher, FetchLimits

HOST = "127.0.0.2"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu(site_pid: int) -> float:
    """CPU seconds of this process and its descendants (Playwright's driver, Chromium), the site excluded."""
    return procmem.tree_cpu_seconds(os.getpid(), exclude={site_pid})


async def run_all(urls: list[str], concurrency: int, one: Any) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def guarded(u: str) -> None:
        async with sem:
            await one(u)

    t0 = time.monotonic()
    await asyncio.gather(*(guarded(u) for u in urls))
    return time.monotonic() - t0


async def bench(
    base: str,
    renderer: Renderer,
    concurrency: int,
    pages: int,
    site_pid: int,
    results: list[dict[str, Any]],
    job_id: str = "bench",
    pages_per_context: int = BrowserSettings().pages_per_context,
) -> list[str]:
    allowed = parse_networks([f"{HOST}/32"])
    extractor = Extractor(ExtractOptions.from_dict({"fields": LISTING_FIELDS}))
    lines: list[str] = []
    extracting = [0.0, 0]  # CPU seconds in the extractor, pages

    def check(body: bytes, url: str) -> None:
        t0 = time.process_time()
        data = extractor.extract(body, url).data
        extracting[0] += time.process_time() - t0
        extracting[1] += 1
        assert len(data["names"]) == 10 and len(data["prices"]) == 10, (url, data)

    # (a) the static fetch path
    # the fetch path is so much cheaper that it runs every listing 20 times, for a measurable CPU time
    static = [base + p for p in listing_paths(renderer, "static")] * 20
    async with Fetcher(allowed=allowed) as fetcher:

        async def fetch_one(u: str) -> None:
            result = await fetcher.fetch(u, limits=FetchLimits())
            check(result.body, u)

        await run_all(static[:20], concurrency, fetch_one)  # warm-up
        cpu0 = cpu(site_pid)
        secs = await run_all(static, concurrency, fetch_one)
        fetch_cpu = (cpu(site_pid) - cpu0) / len(static)
    fetch_rate = len(static) / secs
    lines.append(
        f"fetch   static  pages={len(static)} concurrency={concurrency} seconds={secs:.2f} pages/s={fetch_rate:.1f} "
        f"cpu_ms/page={fetch_cpu * 1000:.1f}"
    )

    # (b) the browser path
    marker = f"bench-{uuid.uuid4().hex[:8]}"  # finds the browser in /proc, as for the peers (Chromium ignores it)
    settings = BrowserSettings(
        pages_per_browser=pages, pages_per_context=pages_per_context, extra_args=(f"--trawl-bench={marker}",)
    )
    pool = BrowserPool(allowed, settings)
    try:
        for flavour, spec in (
            ("js", RenderSpec(mode="Browser", block_resources=list(BLOCKED))),
            (
                "xhr",
                RenderSpec(mode="Browser", wait_for="Selector", selector=XHR_SELECTOR, block_resources=list(BLOCKED)),
            ),
        ):
            urls = [base + p for p in listing_paths(renderer, flavour)]
            await run_all(urls[: 2 * pages], pages, lambda u, spec=spec: pool.render(u, spec, job_id=job_id))
            idle = await pool.memory_bytes()  # the browser started, its context open, no page in flight
            # measured as the peers are (render_peers.Meter): one stream of warm-up, measured pages and a tail
            order = stream(urls, pages)
            meter = Meter(len(order), 2 * pages, marker, tail=pages, exclude=site_pid)
            extracting[:] = [0.0, 0]
            site0 = procmem.cpu_seconds(site_pid)

            async def render_one(u: str, spec: RenderSpec = spec, meter: Meter = meter) -> None:
                result = await pool.render(u, spec, job_id=job_id)  # one job: its pages share a context
                check(result.fetch.body, u)
                meter.page_done()

            await run_all(order, pages, render_one)
            r = meter.result("trawl", pages)
            render_cpu = r["cpu"] / r["pages"]
            site_ms = (procmem.cpu_seconds(site_pid) - site0) / len(order) * 1000
            rate = r["pages"] / r["seconds"]
            per_context = (r["peak_bytes"] - idle) / pages
            lines.append(
                f"render  {flavour:<6}  pages={r['pages']} contexts={pages} seconds={r['seconds']:.2f} "
                f"pages/s={rate:.1f} ratio_vs_fetch={rate / fetch_rate:.3f} cpu_ms/page={render_cpu * 1000:.0f} "
                f"cpu_ratio={render_cpu / max(fetch_cpu, 1e-6):.0f}x browser_idle_MiB={idle / 2**20:.0f} "
                f"browser_peak_MiB={r['peak_bytes'] / 2**20:.0f} per_context_MiB={per_context / 2**20:.1f} "
                f"extract_ms/page={extracting[0] / max(1, extracting[1]) * 1000:.1f}"
            )
            lines.append(
                f"        {flavour:<6}  cpu_ms/page by process: {r['split']} (site, not counted: {site_ms:.0f})"
            )
            results.append({**r, "flavour": flavour, "load": os.getloadavg()[0]})
    finally:
        await pool.close()
    lines.append(f"worker process max RSS MiB={rss_mib():.0f} (Python side of both paths)")
    return lines


PEERS = ("crawlee", "scrapy")


def run_peer(peer: str, flavour: str, pages: int, urls: list[str], tmp: Path) -> dict[str, Any]:
    """One peer on one flavour's listings, in its own process (bench/render_peers.py)."""
    out = tmp / f"render-{peer}-{flavour}.json"
    script = str(Path(__file__).with_name("render_peers.py"))
    proc = subprocess.run([sys.executable, script, peer, flavour, str(pages), str(out), *urls], check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{peer} exited with {proc.returncode}")
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    result["flavour"], result["load"] = flavour, os.getloadavg()[0]
    return result


def peer_line(r: dict[str, Any]) -> str:
    """The figures every renderer is compared on: pages/s, pages/s per core (pages per CPU second of the
    renderer's processes) and memory per concurrent page (the browser's peak PSS / pages at once)."""
    return (
        f"{r['name']:<18} {r['flavour']:<4} pages={r['pages']} pages/s={r['pages'] / r['seconds']:.2f} "
        f"pages/s_per_core={r['pages'] / r['cpu']:.2f} cpu_ms/page={r['cpu'] / r['pages'] * 1000:.0f} "
        f"peak_MiB={r['peak_bytes'] / 2**20:.0f} "
        f"MiB_per_concurrent_page={r['peak_bytes'] / r['concurrency'] / 2**20:.1f} browsers={r.get('browsers', 1)}"
        f" (load {r['load']:.1f})\n    cpu_ms/page by process: {r.get('split', '?')}"
    )


def ratio_line(results: list[dict[str, Any]]) -> str:
    """Trawl against each peer per flavour: per-core throughput (higher is better) and memory (lower)."""
    by = {(r["name"], r["flavour"]): r for r in results}
    parts = []
    for (name, flavour), r in by.items():
        trawl = by.get(("trawl", flavour))
        if name == "trawl" or trawl is None:
            continue
        per_core = (trawl["pages"] / trawl["cpu"]) / (r["pages"] / r["cpu"])
        mem = (trawl["peak_bytes"] / trawl["concurrency"]) / (r["peak_bytes"] / r["concurrency"])
        parts.append(f"vs_{name}_{flavour}: per_core={per_core:.2f} memory={mem:.2f}")
    return "trawl " + "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="60 listings per path instead of 400")
    parser.add_argument("--concurrency", type=int, default=8, help="fetches in flight (static path)")
    parser.add_argument("--pages", type=int, default=8, help="pages rendered at once (browser contexts)")
    parser.add_argument("--no-peers", action="store_true", help="Trawl only (no Crawlee, no scrapy-playwright)")
    parser.add_argument(
        "--context-per-page", action="store_true", help="Trawl renders each page in a context of its own (no job)"
    )
    parser.add_argument(
        "--pages-per-context",
        type=int,
        default=BrowserSettings().pages_per_context,
        help="pages a shared context serves before it is replaced (TRAWL_BROWSER_PAGES_PER_CONTEXT)",
    )
    args = parser.parse_args()
    if find_chromium() is None:
        print("no Chromium: apt-get install chromium", file=sys.stderr)
        return 2
    categories, per_category = (6, 100) if args.quick else (10, 400)  # full pages of 10: 60 or 400 listings
    renderer = Renderer(catalog(categories, per_category, 10))
    port = procs.free_port(HOST)
    argv = [
        sys.executable, "-m", "trawl.dev.jsbookstore", "--host", HOST, "--port", str(port),
        "--categories", str(categories), "--books-per-category", str(per_category), "--per-page", "10",
    ]  # fmt: skip
    log = Path(f"/tmp/trawl-render-bench-{port}.log")
    site = procs.start(argv, log_path=log)
    try:
        procs.wait_for_port(HOST, port, 20, site)
        base = f"http://{HOST}:{port}"
        results: list[dict[str, Any]] = []
        job_id = "" if args.context_per_page else "bench"
        lines = asyncio.run(
            bench(base, renderer, args.concurrency, args.pages, site.pid, results, job_id, args.pages_per_context)
        )
        for line in lines:
            print(line, flush=True)
        lines = [peer_line(r) for r in results]
        for flavour in () if args.no_peers else ("js", "xhr"):
            urls = [base + p for p in listing_paths(renderer, flavour)]
            for peer in PEERS:
                results.append(run_peer(peer, flavour, args.pages, urls, log.parent))
                lines.append(peer_line(results[-1]))
                print(lines[-1], flush=True)
        lines = ["--- side by side (one run each; on a shared machine compare CPU and memory, not pages/s) ---", *lines]
        lines.append(ratio_line(results))
    finally:
        procs.stop(site)
        log.unlink(missing_ok=True)
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
