#!/usr/bin/env python3
"""Crawling again: Trawl's refresh mode vs a full re-crawl vs Scrapy's RFC 2616 HTTP cache, on one site whose
pages change between cycles.

The site (this script's ``--role site``, an aiohttp server in its own process on a free loopback port) has
``--pages`` pages (10,000) of ~8 KB, each with a price the crawlers extract. By page number: 70 % send an
``ETag`` and answer ``If-None-Match`` with 304, 20 % a ``Last-Modified`` and answer ``If-Modified-Since``, 8 %
send no validator, and 2 % send none and print the time of the request in their footer (a noise-only change
on every fetch). Before each cycle the site changes the content of k % of its pages (k = 1, 10, 50: the
ground truth); cycle 0 is the first crawl. The site counts what it served: requests, 304s and body bytes
(uncompressed: no crawler asks for less of a body it needs whole).

Per cycle, on the same site state, one after the other:

* ``trawl-refresh``: one ``trawl worker`` process (concurrency 32) and a real redis-server, a ScrapeJob over
  the page list with ``refresh`` (lineage kept across cycles, fingerprint Record: the price);
* ``trawl-full``: the same job without ``refresh`` (every page fetched and written again);
* ``scrapy``: Scrapy with ``HTTPCACHE_ENABLED`` and ``HTTPCACHE_POLICY = RFC2616Policy`` (its filesystem
  storage, kept across cycles), every request sent with ``Cache-Control: max-age=0`` — what a careful user
  who wants today's page does, as RFC 2616's heuristic freshness (10 % of a Last-Modified page's age) would
  otherwise serve days-old copies without asking — and CONCURRENT_REQUESTS 32, robots.txt off as for Trawl.

Printed per cycle and crawler: requests, 304s, body bytes, CPU seconds (Trawl: the worker process; its
redis-server apart), wall seconds. Trawl's change detection against the ground truth: recall and precision of
the pages it labelled changed (noise-only pages must never be). Last line:
``recall=… precision=… bytes_ratio_k1=… scrapy_bytes_ratio_k1=…`` (bytes of the k = 1 % cycle over those of
the full re-crawl in the same cycle).

    .venv/bin/python bench/recrawl.py            # 10,000 pages, k = 1, 10, 50 (~3 min)
    .venv/bin/python bench/recrawl.py --quick    # 2,000 pages
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from email.utils import formatdate
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "operator"))

CONCURRENCY = 32
CLK_TCK = os.sysconf("SC_CLK_TCK")
PREFIX = "trawl:{bench/recrawl}"
MIX = (("etag", 70), ("lastmod", 20), ("plain", 8), ("noise", 2))  # percent of the pages, by page number
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu")


def kind_of(page: int) -> str:
    slot, edge = page % 100, 0
    for kind, share in MIX:
        edge += share
        if slot < edge:
            return kind
    return MIX[-1][0]


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# --- the site -------------------------------------------------------------------------------------------


class Site:
    """The pages, their versions, and what was served since the last reset."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.version = [1] * pages
        self.bodies: dict[tuple[int, int], str] = {}
        self.stats = {"requests": 0, "not_modified": 0, "bytes": 0, "bytes_validated": 0}

    def body(self, page: int) -> str:
        v = self.version[page]
        cached = self.bodies.get((page, v))
        if cached is None:
            rng = random.Random(page * 1_000_003 + v)
            paras = "".join("<p>" + " ".join(rng.choice(WORDS) for _ in range(60)) + "</p>" for _ in range(18))  # ~8 KB
            cached = self.bodies[(page, v)] = (
                f"<html><head><title>Page {page}</title></head><body><h1>Page {page}</h1>"
                f"<p class=price>{page}.{v:02d}</p>{paras}<footer>{{footer}}</footer></body></html>"
            )
        return cached

    def change(self, percent: float, seed: int) -> list[int]:
        rng = random.Random(seed)
        changed = rng.sample(range(self.pages), round(self.pages * percent / 100))
        for page in changed:
            self.version[page] += 1
        return sorted(changed)

    async def handle(self, request: Any) -> Any:
        from aiohttp import web

        page = int(request.match_info["n"])
        kind, v = kind_of(page), self.version[page]
        self.stats["requests"] += 1
        etag = f'"{page}-{v}"'
        modified = formatdate(1_700_000_000 + v * 86400, usegmt=True)
        if (kind == "etag" and request.headers.get("If-None-Match") == etag) or (
            kind == "lastmod" and request.headers.get("If-Modified-Since") == modified
        ):
            self.stats["not_modified"] += 1
            return web.Response(status=304, headers={"ETag": etag} if kind == "etag" else {})
        headers = {"ETag": etag} if kind == "etag" else {"Last-Modified": modified} if kind == "lastmod" else {}
        footer = f"served at {time.time():.6f}" if kind == "noise" else "static"
        text = self.body(page).replace("{footer}", footer)
        self.stats["bytes"] += len(text)
        if kind in ("etag", "lastmod"):
            self.stats["bytes_validated"] += len(text)
        return web.Response(text=text, content_type="text/html", headers=headers)


def site_main(pages: int, port_file: Path) -> None:
    from aiohttp import web

    site = Site(pages)

    async def control(request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if action == "change":
            changed = site.change(float(request.query["percent"]), int(request.query["seed"]))
            return web.json_response({"changed": changed})
        stats = dict(site.stats)
        site.stats = {"requests": 0, "not_modified": 0, "bytes": 0, "bytes_validated": 0}
        return web.json_response(stats)

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/p/{n}", site.handle)
        app.router.add_post("/__/{action}", control)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        tcp = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await tcp.start()
        # written whole, then renamed: the controller never reads half a port
        port_file.with_suffix(".tmp").write_text(str(runner.addresses[0][1]))
        port_file.with_suffix(".tmp").rename(port_file)
        await asyncio.Event().wait()

    asyncio.run(start())


async def site_call(base: str, action: str, **query: Any) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.post(f"{base}/__/{action}", params=query) as resp:
        result: dict[str, Any] = await resp.json()
        return result


# --- Trawl ----------------------------------------------------------------------------------------------


class Trawl:
    """One redis-server and one ``trawl worker`` process for every Trawl run of the benchmark."""

    def __init__(self, tmp: Path) -> None:
        from trawl.dev.redis_server import RedisServer

        self.tmp = tmp
        self.redis_server = RedisServer()

    async def __aenter__(self) -> Trawl:
        import redis.asyncio as aioredis

        from trawl.dev import procs
        from trawl.queue import Queue

        self.redis_server.__enter__()
        self.redis = aioredis.Redis.from_url(self.redis_server.url)
        self.queue = Queue(self.redis, PREFIX)
        argv = [
            sys.executable, "-m", "trawl.cli", "worker", "--redis-url", self.redis_server.url, "--prefix", PREFIX,
            "--concurrency", str(CONCURRENCY), "--allowed-cidrs", "127.0.0.1/32", "--worker-id", "bench",
            "--log-level", "WARNING",
        ]  # fmt: skip
        self.log = self.tmp / "trawl-worker.log"
        self.worker = procs.start(argv, log_path=self.log)
        return self

    async def __aexit__(self, *exc: object) -> None:
        from trawl.dev import procs

        procs.stop(self.worker, timeout=20)
        await self.redis.aclose()
        self.redis_server.__exit__(None, None, None)

    async def run(self, base: str, pages: int, refresh: bool) -> dict[str, Any]:
        from trawl.api.scrapejob import ScrapeJobSpec
        from trawl.jobspec.wire import build_job_config
        from trawl.queue.keys import Keys

        spec = ScrapeJobSpec.model_validate(
            {
                "pool": "bench",
                "urlRanges": [{"template": base + "/p/{n}", "start": 0, "end": pages - 1}],
                "extract": {"fields": [{"name": "price", "selector": "p.price"}], "title": False},
                "politeness": {
                    "respectRobotsTxt": False,
                    "requestsPerSecond": 10000,
                    "maxConcurrencyPerDomain": 1000,
                    "adaptiveDelay": False,
                },
                **({"refresh": {"lineage": "bench"}} if refresh else {}),
            }
        )
        job_id = uuid.uuid4().hex[:12]
        await self.queue.register_job(build_job_config(job_id, spec, None, "bench/site" if refresh else None))
        cpu0, rcpu0 = proc_cpu(self.worker.pid), proc_cpu(self.redis_server.proc.pid)  # type: ignore[union-attr]
        t0 = time.perf_counter()
        await self.queue.enqueue(job_id, spec.seed_urls())
        await self.queue.mark_enqueue_done(job_id)
        while not (stats := await self.queue.job_stats(job_id)).finished:
            if self.worker.poll() is not None:
                raise SystemExit("trawl worker died:\n" + self.log.read_text()[-3000:])
            await asyncio.sleep(0.02)
        wall = time.perf_counter() - t0
        cpu = proc_cpu(self.worker.pid) - cpu0
        rcpu = proc_cpu(self.redis_server.proc.pid) - rcpu0  # type: ignore[union-attr]
        entries = await self.redis.xrange(Keys(PREFIX).results(job_id))
        records = [json.loads(fields[b"data"]) for _id, fields in entries]
        await self.queue.cancel(job_id)  # its records are read: free Redis for the next cycle
        labels = {int(r["url"].rsplit("/", 1)[1]): r.get("change") for r in records}
        return {"wall": wall, "cpu": cpu, "redis_cpu": rcpu, "dead": stats.dead, "labels": labels,
                "changes": stats.changes}  # fmt: skip


# --- Scrapy ---------------------------------------------------------------------------------------------


def scrapy_main(base: str, pages: int, cache_dir: str, out: Path) -> None:
    import scrapy
    from scrapy.crawler import CrawlerProcess

    prices: dict[int, str] = {}

    class Pages(scrapy.Spider):
        name = "pages"

        def start_requests(self) -> Any:  # Scrapy before 2.13
            for n in range(pages):
                yield scrapy.Request(f"{base}/p/{n}", headers={"Cache-Control": "max-age=0"})

        async def start(self) -> Any:  # Scrapy 2.13 and later
            for request in self.start_requests():
                yield request

        def parse(self, response: Any) -> Any:
            prices[int(response.url.rsplit("/", 1)[1])] = response.css("p.price::text").get()

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": CONCURRENCY,
            "CONCURRENT_REQUESTS_PER_DOMAIN": CONCURRENCY,
            "ROBOTSTXT_OBEY": False,
            "DOWNLOAD_DELAY": 0,
            "AUTOTHROTTLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "TELNETCONSOLE_ENABLED": False,
            "LOG_LEVEL": "WARNING",
            "RETRY_ENABLED": False,
            "HTTPCACHE_ENABLED": True,
            "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy",
            "HTTPCACHE_DIR": cache_dir,
            "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        }
    )
    process.crawl(Pages)
    process.start()
    out.write_text(json.dumps({"pages": len(prices)}))


def run_scrapy(base: str, pages: int, cache_dir: Path, tmp: Path) -> dict[str, Any]:
    out = tmp / "scrapy.json"
    t0 = time.perf_counter()
    argv = [
        sys.executable,
        __file__,
        "--role",
        "scrapy",
        "--base",
        base,
        "--pages",
        str(pages),
        "--cache",
        str(cache_dir),
    ]
    proc = subprocess.Popen([*argv, "--out", str(out)])
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("scrapy failed")
    return {"wall": time.perf_counter() - t0, "cpu": usage.ru_utime + usage.ru_stime, **json.loads(out.read_text())}


# --- main -----------------------------------------------------------------------------------------------


def detection(labels: dict[int, Any], truth: set[int], pages: int) -> dict[str, Any]:
    reported = {p for p, change in labels.items() if change == "changed"}
    hit = reported & truth
    noise = {p for p in reported if kind_of(p) == "noise"} - truth
    return {
        "truth": len(truth),
        "reported": len(reported),
        "recall": len(hit) / len(truth) if truth else 1.0,
        "precision": len(hit) / len(reported) if reported else 1.0,
        "noise_reported": len(noise),
        "unlabelled": pages - len(labels) if labels else None,
    }


def line(name: str, served: dict[str, Any], run: dict[str, Any]) -> str:
    extra = f" redis_cpu={run['redis_cpu']:.2f}s" if "redis_cpu" in run else ""
    return (
        f"  {name:14s} requests={served['requests']:6d} 304s={served['not_modified']:6d} "
        f"bytes={served['bytes'] / 1e6:8.2f}MB cpu={run['cpu']:6.2f}s wall={run['wall']:6.2f}s{extra}"
    )


async def cycle(trawl: Trawl, base: str, args: argparse.Namespace, tmp: Path, k: float, out: dict[str, Any]) -> None:
    truth = set((await site_call(base, "change", percent=k, seed=int(k * 1000) + 7))["changed"]) if k else set()
    await site_call(base, "stats")
    result: dict[str, Any] = {"k": k}
    refresh = await trawl.run(base, args.pages, refresh=True)
    result["trawl-refresh"] = (await site_call(base, "stats"), refresh)
    full = await trawl.run(base, args.pages, refresh=False)
    result["trawl-full"] = (await site_call(base, "stats"), full)
    scrapy = await asyncio.to_thread(run_scrapy, base, args.pages, tmp / "scrapy-cache", tmp)
    result["scrapy"] = (await site_call(base, "stats"), scrapy)
    if k:
        result["detection"] = detection(refresh["labels"], truth, args.pages)
    print(f"cycle k={k:g}%: {len(truth)} pages changed" + (f"; detection {result['detection']}" if k else ""))
    for name in ("trawl-refresh", "trawl-full", "scrapy"):
        served, run = result[name]
        print(line(name, served, run), flush=True)
    for name in ("trawl-refresh", "trawl-full"):
        result[name][1].pop("labels")
    out[f"k{k:g}"] = result


async def controller(args: argparse.Namespace) -> int:
    from trawl.dev import procs

    tmp = Path(tempfile.mkdtemp(prefix="trawl-bench-recrawl-"))
    port_file = tmp / "port"
    site = procs.start(
        [sys.executable, __file__, "--role", "site", "--pages", str(args.pages), "--port-file", str(port_file)]
    )
    out: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if time.monotonic() > deadline or site.poll() is not None:
                raise SystemExit("the site did not start")
            await asyncio.sleep(0.05)
        base = f"http://127.0.0.1:{port_file.read_text()}"
        print(f"recrawl: {args.pages} pages ({', '.join(f'{k} {p}%' for k, p in MIX)}), load {os.getloadavg()}")
        async with Trawl(tmp) as trawl:
            for k in (0.0, *args.k):
                await cycle(trawl, base, args, tmp, k, out)
    finally:
        procs.stop(site, timeout=10)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))  # noqa: ASYNC240 - once, at the end
    cycles = [out[f"k{k:g}"] for k in args.k]
    recall = min(c["detection"]["recall"] for c in cycles)
    precision = min(c["detection"]["precision"] for c in cycles)
    k1 = out[f"k{args.k[0]:g}"]
    full_bytes = k1["trawl-full"][0]["bytes"]
    validated = k1["trawl-refresh"][0]["bytes_validated"] / k1["trawl-full"][0]["bytes_validated"]
    print(f"bytes ratio at k={args.k[0]:g}% of the pages with validators alone: {validated:.4f}")
    print(
        f"recall={recall:.4f} precision={precision:.4f} "
        f"bytes_ratio_k1={k1['trawl-refresh'][0]['bytes'] / full_bytes:.4f} "
        f"scrapy_bytes_ratio_k1={k1['scrapy'][0]['bytes'] / full_bytes:.4f}"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", default="controller", choices=["controller", "site", "scrapy"])
    ap.add_argument("--pages", type=int, default=0, help="pages of the site (10,000; --quick 2,000)")
    ap.add_argument("--k", default="1,10,50", help="percent of the pages changed before each cycle")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--port-file", default="")
    ap.add_argument("--base", default="")
    ap.add_argument("--cache", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    args.pages = args.pages or (2000 if args.quick else 10_000)
    if args.role == "site":
        site_main(args.pages, Path(args.port_file))
        return 0
    if args.role == "scrapy":
        scrapy_main(args.base, args.pages, args.cache, Path(args.out))
        return 0
    args.k = [float(x) for x in args.k.split(",")]
    return asyncio.run(controller(args))


if __name__ == "__main__":
    sys.exit(main())
