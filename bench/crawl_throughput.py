#!/usr/bin/env python3
"""Crawl throughput: one Trawl worker vs Scrapy vs Crawlee vs a bare asyncio loop, on the same static site.

The site is the bookstore fixture (``trawl.dev.bookstore``) written as static files — home, paginated
listings and product pages of ~30 KB with ~40 links each — and served by nginx (started here on a
free port with its own config in a temp dir, stopped afterwards). Each crawler starts from the home
page, follows every same-host link once and extracts the same five fields with the same CSS selectors
from every product page:

(a) Trawl: one ``trawl worker`` process (concurrency 32) through the real Redis queue (a real
    ``redis-server``), the pool-wide rate/concurrency limiter, robots.txt, the safe fetcher and the
    Redis stream sink; crawl mode with canonicalisation and exact maxPages/dedupe in the queue.
(b) Scrapy: one process, CONCURRENT_REQUESTS 32, robots.txt, delays and AutoThrottle off.
(c) A bare loop: aiohttp + selectolax + a seen-set in one process, no queue, no safety, no sink: the
    ceiling of one Python process.
(d) Crawlee for Python: its HTTP ``ParselCrawler`` (same parsel selectors as Scrapy), concurrency pinned
    at 32, in-memory storage, retries and robots.txt off (``crawlee_main``).

Fixed vs per-page cost (``crawl_phases``): from nginx's request log, each crawler's first request after
its exec, its steady state (pages/s over the middle 80 % of its requests) and CPU per page over that
window (Trawl: worker + Redis), beside the whole-run figures. The last line: Trawl against the bare loop,
Scrapy and Crawlee on each of these.

All of them must return the same records. Printed per crawler: pages, seconds, pages/s and CPU seconds
per page of the crawler process (Trawl's Redis server is reported separately), then the phases table,
``ratio_vs_ceiling=...``, ``ratio_vs_scrapy=...`` and the ratio line described above.

    .venv/bin/python bench/crawl_throughput.py            # 2,000 products (2,101 pages)
    .venv/bin/python bench/crawl_throughput.py --quick    # 400 products, under a minute
    .venv/bin/python bench/crawl_throughput.py --large    # 19,000 products (~20,000 pages)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from crawl_phases import CpuSampler, log_offset, phases, request_times

FIELDS = {  # name -> CSS selector; the same for all three crawlers (trawl.dev.bookstore.PRODUCT_FIELDS)
    "name": "div.product h1",
    "price": "p.price",
    "upc": "#upc",
    "stock": "p.stock",
    "category": "ul.breadcrumb li.category a",
}
PRODUCT_RE = r"/product/\d+\.html$"
CONCURRENCY = 32
CLK_TCK = os.sysconf("SC_CLK_TCK")


def compile_bytecode(pythonpath: str | None = None) -> None:
    """Byte-compile the worker's code (this tree's ``trawl``, or the one under ``pythonpath``) as the image
    does at build (``compileall``), so a worker starts from ``__pycache__`` as in a pod.

    With ``PYTHONDONTWRITEBYTECODE`` set (as in this project's sessions) a tree whose ``.pyc`` files are
    missing or older than its sources compiles every such module at every worker start: ~90 ms of CPU
    for a fresh tree, which the peers (installed by pip, byte-compiled) never pay."""
    import trawl

    root = Path(pythonpath) / "trawl" if pythonpath else Path(trawl.__file__).parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root)], check=True)


def proc_cpu(pid: int) -> float:
    """utime + stime of a live process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu(pid: int) -> float:
    """CPU seconds of a live process and its live children (the worker's parser processes)."""
    total = proc_cpu(pid)
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        with contextlib.suppress(OSError):
            total += tree_cpu(int(child))
    return total


# --- the site ---------------------------------------------------------------------------------------


def build_site(root: Path, products: int) -> int:
    from trawl.dev.bookstore import Renderer, catalog, write_static_site

    categories = 20
    renderer = Renderer(
        catalog(categories, products // categories, per_page=20), related=16, filler_bytes=26000, hostile_links=False
    )
    return write_static_site(root, renderer)


NGINX_CONF = """
{user}
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  log_format msec '$msec $request';
  access_log {access_log};
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 60;
  types {{ text/html html; text/plain txt; }}
  default_type application/octet-stream;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    index index.html;
  }}
}}
"""


class Nginx:
    def __init__(self, root: Path, tmp: Path, *, access_log: bool = False) -> None:
        from trawl.dev import procs

        self.procs = procs
        self.root = root
        self.tmp = tmp
        self.access_log = tmp / "access.log"  # "<unix time with ms> <request line>" when access_log is set
        self.log_requests = access_log
        self.port = procs.free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(exe).exists():
            raise SystemExit("nginx not found: apt-get install -y nginx-light")
        conf = self.tmp / "nginx.conf"
        user = "user root;" if os.geteuid() == 0 else ""
        access_log = f"{self.access_log} msec" if self.log_requests else "off"
        conf.write_text(
            NGINX_CONF.format(user=user, tmp=self.tmp, port=self.port, root=self.root, access_log=access_log)
        )
        self.proc = self.procs.start([exe, "-p", str(self.tmp), "-c", str(conf)], log_path=self.tmp / "nginx.out")
        self.procs.wait_for_port("127.0.0.1", self.port, 15, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.procs.stop(self.proc, timeout=5)


async def redis_calls(redis: Any) -> int:
    """Requests the Redis server has read from its clients so far (INFO stats ``total_reads_processed``:
    one per round trip, a pipeline or a script call counting once, commands inside scripts not at all)."""
    stats = await redis.info("stats")
    if os.environ.get("TRAWL_BENCH_REDIS_STATS"):  # print the calls by command (diff two prints by eye)
        cmd = await redis.info("commandstats")
        print({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in cmd.items()}, flush=True)
    return int(stats["total_reads_processed"])


# --- (a) Trawl ----------------------------------------------------------------------------------------


SINKS = ("stream", "jsonl", "postgres", "s3")  # trawl with the Redis stream sink is plain "trawl"


@contextlib.contextmanager
def sink_server(sink: str, tmp: Path) -> Any:
    """The sink's real server for the run (PostgreSQL, MinIO), its output spec and the worker's secrets."""
    if sink == "postgres":
        from trawl.dev.postgres_server import PostgresServer

        with PostgresServer() as pg:
            output = {
                "sink": "PostgreSQL",
                "postgres": {
                    "host": "127.0.0.1", "port": pg.port, "database": pg.database, "user": pg.user,
                    "passwordSecretRef": {"name": "pg", "key": "password"}, "table": "bench", "sslMode": "disable",
                },
            }  # fmt: skip
            yield pg, output, {"TRAWL_SECRET_PG_PASSWORD": pg.password}
    elif sink == "s3":
        from minio import Minio

        from trawl.dev.s3_server import S3Server

        with S3Server() as s3:
            Minio(f"127.0.0.1:{s3.port}", s3.access_key, s3.secret_key, secure=False).make_bucket("bench")
            output = {
                "sink": "S3",
                "s3": {
                    "bucket": "bench", "endpoint": s3.endpoint, "pathStyle": True,
                    "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
                    "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
                },
            }  # fmt: skip
            yield s3, output, {"TRAWL_SECRET_S3_ID": s3.access_key, "TRAWL_SECRET_S3_SECRET": s3.secret_key}
    elif sink == "jsonl":
        yield None, {"sink": "JsonLines", "jsonLines": {"directory": str(tmp / "jsonl")}}, {}
    else:
        yield None, None, {}


async def read_back(sink: str, server: Any, output: Any, redis: Any, prefix: str, job_id: str) -> list[dict[str, Any]]:
    """Every record the sink holds for the job."""
    if sink == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(server.dsn()) as conn:
            cur = await conn.execute("SELECT data FROM bench WHERE job = %s", (job_id,))
            return [dict(row[0]) for row in await cur.fetchall()]
    if sink == "s3":
        from trawl.api.scrapejob import S3Sink
        from trawl.sinks import s3 as s3sink

        target = s3sink.target_from_spec(S3Sink.model_validate(output["s3"]), server.access_key, server.secret_key)
        return await asyncio.to_thread(s3sink.read_records, target, job_id)
    if sink == "jsonl":
        path = Path(output["jsonLines"]["directory"]) / f"{job_id}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]
    from trawl.queue.keys import Keys

    return [json.loads(f[b"data"]) for _id, f in await redis.xrange(Keys(prefix).results(job_id))]


async def run_trawl(
    base: str,
    tmp: Path,
    expected_pages: int,
    mode: str = "trawl",
    sink: str = "stream",
    *,
    cold: bool = False,
    pythonpath: str | None = None,
    crawl: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``mode``: trawl (as shipped: small pages inline, big ones in a parser process), trawl-inline (no
    parser processes), trawl-child (every page through a parser process: the cost of full isolation).
    ``sink``: where the worker writes (stream, jsonl, postgres, s3), each against a real server.
    ``cold``: the clock (and CPU) starts before the worker process is started, not once it polls.
    ``pythonpath``: the worker runs the code found there (another commit's ``operator/``).
    ``crawl``: fields set on the job's spec.crawl (bench/frontier.py: a Bloom filter)."""
    if pythonpath:
        secrets = {"PYTHONPATH": pythonpath}
        with sink_server(sink, tmp) as (server, output, more):
            return await _run_trawl(base, tmp, mode, sink, server, output, secrets | more, cold, crawl)
    with sink_server(sink, tmp) as (server, output, secrets):
        if sink == "postgres":  # what the operator does when it accepts the job: create the table
            from trawl.api.scrapejob import PostgresSink
            from trawl.sinks.postgres import ensure_table, target_from_spec

            await ensure_table(target_from_spec(PostgresSink.model_validate(output["postgres"]), server.password))
        return await _run_trawl(base, tmp, mode, sink, server, output, secrets, cold, crawl)


async def _run_trawl(
    base: str,
    tmp: Path,
    mode: str,
    sink: str,
    server: Any,
    output: Any,
    secrets: dict[str, str],
    cold: bool,
    crawl: dict[str, Any] | None = None,
) -> dict[str, Any]:
    import redis.asyncio as aioredis

    from trawl.api.scrapejob import ScrapeJobSpec
    from trawl.dev import procs
    from trawl.dev.redis_server import RedisServer
    from trawl.jobspec.wire import build_job_config
    from trawl.queue import Queue
    from trawl.queue.keys import Keys

    prefix = "trawl:{bench/crawl}"
    with RedisServer() as redis_server:
        redis = aioredis.Redis.from_url(redis_server.url)
        queue = Queue(redis, prefix)
        job_id = uuid.uuid4().hex[:12]
        spec = ScrapeJobSpec.model_validate(
            {
                "pool": "crawl",
                "urls": [base + "/"],
                "crawl": {"maxDepth": 100, "maxPages": 1_000_000, **(crawl or {})},
                "extract": {
                    "fields": [{"name": n, "selector": s} for n, s in FIELDS.items()],
                    "onlyMatching": PRODUCT_RE,
                    "title": False,
                },
                # robots.txt off, as for Scrapy (ROBOTSTXT_OBEY False); the rate and concurrency limiter
                # stays on, set high; adaptive delay off, as AutoThrottle is for Scrapy
                "politeness": {
                    "respectRobotsTxt": False,
                    "requestsPerSecond": 10000,
                    "maxConcurrencyPerDomain": 1000,
                    "adaptiveDelay": False,
                },
                **({"output": output} if output else {}),
            }
        )
        argv = [
            sys.executable, "-m", "trawl.cli", "worker", "--redis-url", redis_server.url, "--prefix", prefix,
            "--concurrency", str(CONCURRENCY), "--allowed-cidrs", "127.0.0.1/32", "--worker-id", "bench",
            "--log-level", "WARNING", "--parse-processes", "0" if mode == "trawl-inline" else "2",
            "--parse-inline-max-tags", "0" if mode == "trawl-child" else "2048",
        ]  # fmt: skip
        redis_pid = redis_server.proc.pid  # type: ignore[union-attr]
        log_path = tmp / "trawl-worker.log"
        profiler = None
        if cold:
            # As a crawler is run: the clock starts before the process exists (imports, client set-up,
            # first claim included); the job is registered and its seed enqueued meanwhile, as the
            # operator does while the autoscaler starts a worker.
            rcpu0, calls0 = proc_cpu(redis_pid), await redis_calls(redis)
            t0, wall0 = time.perf_counter(), time.time()
            worker = procs.start(argv, log_path=log_path, env=dict(os.environ) | secrets)
            sampler = CpuSampler(lambda: tree_cpu(worker.pid) + proc_cpu(redis_pid)).start()
            cpu0 = 0.0  # a new process: all of its CPU time counts
            await queue.register_job(build_job_config(job_id, spec, None))
            await queue.enqueue(job_id, [base + "/"])
            await queue.mark_enqueue_done(job_id)
        else:
            await queue.register_job(build_job_config(job_id, spec, None))
            worker = procs.start(argv, log_path=log_path, env=dict(os.environ) | secrets)
        try:
            if not cold:  # the crawl alone: the worker is up and polling before the clock starts
                deadline = time.monotonic() + 30
                # the worker registers as an incarnation of its pod name: "bench@<random>"
                info_key = Keys(prefix).worker_info
                while not any(k.decode().split("@", 1)[0] == "bench" for k in await redis.hkeys(info_key)):
                    if worker.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("trawl worker did not start:\n" + log_path.read_text())
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
                # TRAWL_BENCH_PYSPY=<path>: profile the worker with py-spy (collapsed stacks)
                profile = os.environ.get("TRAWL_BENCH_PYSPY")
                if profile:
                    pyspy = str(Path(sys.executable).with_name("py-spy"))
                    profiler = procs.start(
                        [pyspy, "record", "--format", "raw", "-r", "200", "-o", profile, "--pid", str(worker.pid)]
                        + (["--gil"] if os.environ.get("TRAWL_BENCH_PYSPY_GIL") else [])  # Python's CPU only
                    )
                    await asyncio.sleep(1.0)
                sampler = CpuSampler(lambda: tree_cpu(worker.pid) + proc_cpu(redis_pid)).start()
                cpu0, rcpu0, calls0 = tree_cpu(worker.pid), proc_cpu(redis_pid), await redis_calls(redis)
                t0, wall0 = time.perf_counter(), time.time()
                await queue.enqueue(job_id, [base + "/"])
                await queue.mark_enqueue_done(job_id)
            polls = 0
            while True:
                stats = await queue.job_stats(job_id)  # one HMGET, subtracted from the commands below
                polls += 1
                if stats.finished:
                    break
                if worker.poll() is not None:
                    raise SystemExit("trawl worker died:\n" + log_path.read_text()[-3000:])
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - t0
            cpu = tree_cpu(worker.pid) - cpu0
            rcpu = proc_cpu(redis_pid) - rcpu0
            calls = await redis_calls(redis) - calls0 - polls - (4 if cold else 3)  # the bench's own commands
            samples = sampler.stop()
        finally:
            if profiler is not None:
                procs.stop(profiler, timeout=30, sig=signal.SIGINT)  # py-spy writes its output on SIGINT
            procs.stop(worker, timeout=20)
        stored = await read_back(sink, server, output, redis, prefix, job_id)
        records = {}
        for data in stored:
            records[data["url"]] = {k: data.get(k) for k in FIELDS}
        await redis.aclose()
    return {
        "name": ("trawl" if cold else mode) + ("" if sink == "stream" else f"-{sink}"),
        "stored": len(stored),
        "pages": stats.succeeded,
        "dead": stats.dead,
        "seconds": elapsed,
        "cpu": cpu,
        "redis_cpu": rcpu,
        "redis_calls": calls,
        "records": records,
        "exec_at": wall0,  # cold: the worker's exec; warm: the seed's enqueue (the worker already polling)
        "samples": samples,
        # the queue's own timestamps (unix seconds): the first claim after the clock started, and the crawl
        # from that claim to the job's last result (Trawl's figure "timed inside the process")
        "first_claim": (stats.first_claim_at or wall0) - wall0,
        "seconds_inside": (stats.finished_at or time.time()) - (stats.first_claim_at or wall0),
    }


# --- (b) Scrapy -----------------------------------------------------------------------------------------


def scrapy_main(base: str, out: Path) -> None:
    import re

    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    product = re.compile(PRODUCT_RE)
    records: dict[str, dict[str, str | None]] = {}
    timing: dict[str, float] = {}
    pages = [0]

    def clean(values: list[str]) -> str | None:
        text = " ".join("".join(values).split())
        return text if values else None

    class BookSpider(scrapy.Spider):
        name = "books"
        allowed_domains = ["127.0.0.1"]
        start_urls = [base + "/"]

        def parse(self, response: Any) -> Any:
            pages[0] += 1
            if product.search(response.url):
                records[response.url] = {n: clean(response.css(s + " ::text").getall()) for n, s in FIELDS.items()}
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

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
            "DEPTH_LIMIT": 0,
            "RETRY_ENABLED": False,
            "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        }
    )
    crawler = process.create_crawler(BookSpider)

    def opened(spider: Any) -> None:
        timing["t0"], timing["c0"] = time.perf_counter(), time.process_time()

    def closed(spider: Any) -> None:
        timing["t1"], timing["c1"] = time.perf_counter(), time.process_time()

    crawler.signals.connect(opened, signal=signals.spider_opened)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    process.crawl(crawler)
    process.start()
    out.write_text(
        json.dumps(
            {
                "name": "scrapy",
                "pages": pages[0],
                "seconds": timing["t1"] - timing["t0"],
                "cpu": timing["c1"] - timing["c0"],
                "records": records,
            }
        )
    )


# --- (c) the bare loop ----------------------------------------------------------------------------------


def bare_main(base: str, out: Path) -> None:
    import re
    from urllib.parse import urldefrag, urljoin, urlsplit

    import aiohttp
    from selectolax.lexbor import LexborHTMLParser

    product = re.compile(PRODUCT_RE)
    host = urlsplit(base).netloc
    records: dict[str, dict[str, str | None]] = {}
    pages = [0]

    async def crawl() -> None:
        seen = {base + "/"}
        queue: asyncio.Queue[str] = asyncio.Queue()
        queue.put_nowait(base + "/")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:

            async def worker() -> None:
                while True:
                    url = await queue.get()
                    try:
                        async with session.get(url) as resp:
                            body = await resp.read()
                        pages[0] += 1
                        tree = LexborHTMLParser(body)
                        if product.search(url):
                            rec: dict[str, str | None] = {}
                            for name, sel in FIELDS.items():
                                node = tree.css_first(sel)
                                rec[name] = " ".join(node.text().split()) if node is not None else None
                            records[url] = rec
                        for a in tree.css("a[href]"):
                            href = a.attributes.get("href")
                            if not href:
                                continue
                            link = urldefrag(urljoin(url, href))[0]
                            if link not in seen and urlsplit(link).netloc == host:
                                seen.add(link)
                                queue.put_nowait(link)
                    finally:
                        queue.task_done()

            tasks = [asyncio.create_task(worker()) for _ in range(CONCURRENCY)]
            await queue.join()
            for t in tasks:
                t.cancel()

    t0, c0 = time.perf_counter(), time.process_time()
    asyncio.run(crawl())
    t1, c1 = time.perf_counter(), time.process_time()
    out.write_text(
        json.dumps({"name": "bare", "pages": pages[0], "seconds": t1 - t0, "cpu": c1 - c0, "records": records})
    )


# --- (d) Crawlee -----------------------------------------------------------------------------------------


def crawlee_main(base: str, out: Path) -> None:
    """Crawlee for Python's HTTP crawler as its docs tune it for a known site: ParselCrawler (the same
    parsel selectors as Scrapy; lxml underneath, faster than BeautifulSoup), concurrency pinned at 32 (the
    autoscaled pool otherwise starts at 10 and backs off on a loaded machine), storage in memory (no
    request queue or dataset files, as Scrapy and the bare loop keep theirs), no retries, robots.txt off
    (its default), records kept in the process as the others do, links enqueued same-hostname."""
    import logging
    import re
    from datetime import timedelta

    from crawlee import ConcurrencySettings
    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
    from crawlee.storage_clients import MemoryStorageClient

    product = re.compile(PRODUCT_RE)
    records: dict[str, dict[str, str | None]] = {}
    pages = [0]
    timing: dict[str, float] = {}

    def clean(values: list[str]) -> str | None:
        text = " ".join("".join(values).split())
        return text if values else None

    crawler = ParselCrawler(
        concurrency_settings=ConcurrencySettings(
            min_concurrency=CONCURRENCY, desired_concurrency=CONCURRENCY, max_concurrency=CONCURRENCY
        ),
        storage_client=MemoryStorageClient(),
        max_request_retries=0,
        max_crawl_depth=None,
        respect_robots_txt_file=False,
        configure_logging=False,
        status_message_logging_interval=timedelta(hours=1),
    )
    logging.getLogger("crawlee").setLevel(logging.WARNING)

    @crawler.router.default_handler
    async def handler(context: ParselCrawlingContext) -> None:
        if not pages[0]:
            timing["t0"], timing["c0"] = time.perf_counter(), time.process_time()
        pages[0] += 1
        url = context.request.url
        if product.search(url):
            records[url] = {n: clean(context.selector.css(s + " ::text").getall()) for n, s in FIELDS.items()}
        await context.enqueue_links(strategy="same-hostname")

    asyncio.run(crawler.run([base + "/"]))
    t1, c1 = time.perf_counter(), time.process_time()
    out.write_text(
        json.dumps(
            {
                "name": "crawlee",
                "pages": pages[0],
                "seconds": t1 - timing["t0"],
                "cpu": c1 - timing["c0"],
                "records": records,
            }
        )
    )


def run_child(kind: str, base: str, tmp: Path) -> dict[str, Any]:
    """Run Scrapy or the bare loop as a process. Its headline figures cover the whole process (start-up and
    exit included, as for Trawl's worker process); the figures it took inside itself (from its first
    request to its last) are kept beside them as ``seconds_inside`` and ``cpu_inside``."""
    out = tmp / f"{kind}.json"
    t0, exec_at = time.perf_counter(), time.time()
    proc = subprocess.Popen([sys.executable, __file__, f"--_{kind}", base, str(out)])
    sampler = CpuSampler(lambda: tree_cpu(proc.pid)).start()
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    samples = sampler.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} exited with {proc.returncode}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["seconds_inside"], result["cpu_inside"] = result["seconds"], result["cpu"]
    result["seconds"], result["cpu"] = elapsed, usage.ru_utime + usage.ru_stime
    result["exec_at"], result["samples"] = exec_at, samples
    return result


# --- main -----------------------------------------------------------------------------------------------


KINDS = (  # the order of one round; rounds are interleaved
    "bare",
    "scrapy",
    "crawlee",
    "trawl",
    "trawl-warm",
    "trawl-compare",  # as "trawl", with the worker running the code of --compare DIR
    "trawl-inline",
    "trawl-child",
    "trawl-jsonl",
    "trawl-postgres",
    "trawl-s3",
)


def summarize(kind: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run of a crawler by pages/s, with the median of each per-page figure beside it."""
    ordered = sorted(runs, key=lambda r: r["pps"])
    out = dict(ordered[(len(ordered) - 1) // 2])  # the lower median: a real run, not an average of two
    out["pps_all"] = [r["pps"] for r in runs]
    out["cpu_ms"] = statistics.median(r["cpu"] / r["pages"] * 1000 for r in runs)
    out["redis_ms"] = statistics.median(r.get("redis_cpu", 0.0) / r["pages"] * 1000 for r in runs)
    out["total_ms"] = statistics.median((r["cpu"] + r.get("redis_cpu", 0.0)) / r["pages"] * 1000 for r in runs)
    if "redis_calls" in out:
        out["calls_per_page"] = statistics.median(r["redis_calls"] / r["pages"] for r in runs)
    if "first_claim" in out:
        out["first_claim_ms"] = statistics.median(r["first_claim"] * 1000 for r in runs)
    if "seconds_inside" in out:
        out["pps_inside"] = statistics.median(r["pages"] / r["seconds_inside"] for r in runs)
    if "cpu_inside" in out:
        out["cpu_inside_ms"] = statistics.median(r["cpu_inside"] / r["pages"] * 1000 for r in runs)
    out["first_request_ms"] = statistics.median(r["phases"].first_request * 1000 for r in runs)
    out["steady_pps"] = statistics.median(r["phases"].steady_pps for r in runs)
    out["steady_cpu_ms"] = statistics.median(r["phases"].steady_cpu_ms for r in runs)
    return out


def print_phases(results: dict[str, dict[str, Any]]) -> None:
    """Fixed vs per-page cost: each crawler's first request, steady state and whole run (medians)."""
    print(
        f"{'crawler':14} {'first req ms':>12} {'steady pages/s':>15} {'steady CPU ms/page':>19}"
        f" {'whole pages/s':>14} {'whole CPU ms/page':>18}"
    )
    for r in results.values():
        print(
            f"{r['name']:14} {r['first_request_ms']:>12.0f} {r['steady_pps']:>15.1f} {r['steady_cpu_ms']:>19.3f}"
            f" {r['pps']:>14.1f} {r['total_ms']:>18.3f}"
        )


def ratio_line(results: dict[str, dict[str, Any]]) -> str | None:
    """Trawl (the worker process started with the clock) against each peer: whole run, steady pages/s,
    steady CPU per page (worker + Redis vs the peer's process) and first request (ms) side by side."""
    trawl = results.get("trawl") or results.get("trawl-warm")
    if trawl is None:
        return None
    parts = []
    for peer in ("bare", "scrapy", "crawlee"):
        p = results.get(peer)
        if p is not None:
            parts.append(
                f"vs_{peer}: whole={trawl['pps'] / p['pps']:.2f} steady={trawl['steady_pps'] / p['steady_pps']:.2f}"
                f" steady_cpu={trawl['steady_cpu_ms'] / p['steady_cpu_ms']:.2f}"
                f" first_request_ms={trawl['first_request_ms']:.0f}/{p['first_request_ms']:.0f}"
            )
    return f"{trawl['name']} " + "; ".join(parts) if parts else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="400 products instead of 2,000 (under a minute).")
    parser.add_argument("--products", type=int, default=None)
    parser.add_argument(
        "--large", action="store_true", help="19,000 products (~20,000 pages): the per-page cost dominates."
    )
    parser.add_argument(
        "--only",
        choices=KINDS,
        action="append",
        help="Run only these (trawl: a worker process started with the clock; trawl-warm: the crawl alone, the "
        "worker already polling; trawl-<sink>: warm, writing to that sink instead of the Redis stream).",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="Run each crawler N times, interleaved; report each one's median run."
    )
    parser.add_argument(
        "--compare",
        metavar="DIR",
        help="Also run 'trawl-compare': the worker process on the code under DIR (PYTHONPATH; e.g. an older "
        "commit's operator/ from git archive), interleaved with the others under the same load.",
    )
    parser.add_argument("--_scrapy", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--_bare", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--_crawlee", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._scrapy:
        scrapy_main(args._scrapy[0], Path(args._scrapy[1]))
        return
    if args._bare:
        bare_main(args._bare[0], Path(args._bare[1]))
        return
    if args._crawlee:
        crawlee_main(args._crawlee[0], Path(args._crawlee[1]))
        return

    products = args.products or (400 if args.quick else 19000 if args.large else 2000)
    only = (args.only or ["bare", "scrapy", "crawlee", "trawl", "trawl-warm"]) + (
        ["trawl-compare"] if args.compare else []
    )
    if any(kind.startswith("trawl") for kind in only):
        compile_bytecode()
        if args.compare:
            compile_bytecode(args.compare)
    tmp = Path(tempfile.mkdtemp(prefix="trawl-crawlbench-"))
    loads = [os.getloadavg()]
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        root = tmp / "site"
        pages = build_site(root, products)
        sizes = [p.stat().st_size for p in (root / "product").iterdir()]
        print(
            f"site: {pages} pages ({products} products of {sum(sizes) / len(sizes) / 1024:.1f} KB avg), nginx",
            flush=True,
        )
        nginx = Nginx(root, tmp, access_log=True).start()  # the request log times the phases
        try:
            base = f"http://127.0.0.1:{nginx.port}"
            for round_no in range(args.repeat):
                for kind in KINDS:
                    if kind not in only:
                        continue
                    offset = log_offset(nginx.access_log)
                    if kind.startswith("trawl"):
                        sink = kind.removeprefix("trawl-") if kind.removeprefix("trawl-") in SINKS else "stream"
                        mode = "trawl" if sink != "stream" or kind == "trawl-warm" else kind
                        cold = kind in ("trawl", "trawl-compare")
                        pythonpath = args.compare if kind == "trawl-compare" else None
                        mode = "trawl" if kind == "trawl-compare" else mode
                        r = asyncio.run(run_trawl(base, tmp, pages, mode, sink, cold=cold, pythonpath=pythonpath))
                        r["name"] = kind
                    else:
                        r = run_child(kind, base, tmp)
                    r["pps"] = r["pages"] / r["seconds"]
                    r["phases"] = phases(request_times(nginx.access_log, offset), r.pop("exec_at"), r.pop("samples"))
                    total = (r["cpu"] + r.get("redis_cpu", 0.0)) / r["pages"] * 1000
                    ph = r["phases"]
                    print(
                        f"  run {round_no + 1} {kind}: {r['pps']:.1f} pages/s, {total:.3f} ms CPU/page;"
                        f" first request {ph.first_request * 1000:.0f} ms, steady {ph.steady_pps:.1f} pages/s"
                        f" {ph.steady_cpu_ms:.3f} ms CPU/page (load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
                    runs.setdefault(kind, []).append(r)
                loads.append(os.getloadavg())
        finally:
            nginx.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    results = {kind: summarize(kind, rs) for kind, rs in runs.items()}
    print(
        f"median of {args.repeat} interleaved runs; load average (1 min) {min(x[0] for x in loads):.1f}"
        f"-{max(x[0] for x in loads):.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'crawler':14} {'pages':>6} {'records':>7} {'seconds':>8} {'pages/s':>9} {'CPU ms/page':>12}"
        f" {'(+redis)':>9} {'inside pages/s':>15}"
    )
    for r in results.values():
        inside = f"{r['pps_inside']:>15.1f}" if "pps_inside" in r and r["name"] != "trawl-warm" else f"{'':>15}"
        redis_ms = f"{r['redis_ms']:>9.3f}" if "redis_cpu" in r else f"{'':>9}"
        print(
            f"{r['name']:14} {r['pages']:>6} {len(r['records']):>7} {r['seconds']:>8.2f} {r['pps']:>9.1f}"
            f" {r['total_ms']:>12.3f} {redis_ms} {inside}"
        )
    print_phases(results)
    for r in results.values():
        if "calls_per_page" in r:
            print(
                f"{r['name']}: {r['calls_per_page']:.2f} Redis round trips/page (all clients but the bench);"
                f" first claim {r['first_claim_ms']:.0f} ms after the clock started"
            )
    reference = next(iter(runs.values()))[0]["records"]
    same = all(r["records"] == reference for rs in runs.values() for r in rs)
    print(f"same records: {same} ({len(reference)} products, expected {products})")
    if not same or len(reference) != products:
        for kind, rs in runs.items():
            for r in rs:
                missing = set(reference) - set(r["records"])
                print(f"  {kind}: {len(r['records'])} records, {len(missing)} missing vs first")
        raise SystemExit(1)
    trawl, warm = results.get("trawl"), results.get("trawl-warm")
    scrapy_r, bare = results.get("scrapy"), results.get("bare")
    if trawl and bare:  # the headline: processes started with the clock, CPU per page with Redis's
        print(
            f"ratio_vs_ceiling={trawl['pps'] / bare['pps']:.2f} "
            f"cpu_per_page_vs_ceiling={trawl['total_ms'] / bare['total_ms']:.2f}"
        )
    if trawl and scrapy_r:
        print(f"ratio_vs_scrapy={trawl['pps'] / scrapy_r['pps']:.2f}")
    compare = results.get("trawl-compare")
    if compare and bare:  # the same headline for the code under --compare
        print(
            f"compare ({args.compare}): ratio_vs_ceiling={compare['pps'] / bare['pps']:.2f} "
            f"cpu_per_page_vs_ceiling={compare['total_ms'] / bare['total_ms']:.2f}"
            + (f" ratio_vs_scrapy={compare['pps'] / scrapy_r['pps']:.2f}" if scrapy_r else "")
        )
    if warm and bare and "pps_inside" in bare:  # timed inside: the crawl alone, without start-up
        print(
            f"inside: ratio_vs_ceiling={warm['pps'] / bare['pps_inside']:.2f} "
            f"cpu_per_page_vs_ceiling={warm['total_ms'] / bare['cpu_inside_ms']:.2f}"
            + (f" ratio_vs_scrapy={warm['pps'] / scrapy_r['pps_inside']:.2f}" if scrapy_r else "")
        )
    inline = results.get("trawl-inline")
    if warm and inline:  # what the parse limits cost as shipped (small pages stay inline)
        print(f"ratio_shipped_vs_inline={warm['pps'] / inline['pps']:.2f}")
    child = results.get("trawl-child")
    if child and inline:  # what sending every page to a parser process would cost
        print(f"ratio_all_pages_in_child_vs_inline={child['pps'] / inline['pps']:.2f}")
    for name, r in results.items():  # each sink: records it stored per second, and the crawl vs the bare loop
        if name.startswith("trawl-") and name.removeprefix("trawl-") in SINKS:
            dup = r["stored"] - len(r["records"])
            vs_bare = f" ratio_vs_ceiling_inside={r['pps'] / bare['pps_inside']:.2f}" if bare else ""
            print(f"sink {name}: {r['stored'] / r['seconds']:.1f} records/s, {dup} duplicates{vs_bare}")
    last = ratio_line(results)
    if last:
        print(last)


if __name__ == "__main__":
    main()
