#!/usr/bin/env python3
"""A crawl's frontier in Redis: bytes per seen URL, false positives and throughput, exact vs Bloom dedupe.

For each size N (100 k, 1 M, 10 M URLs) and each dedupe tier -- exact (the job's set of 12-byte digests),
Bloom at 0.001 (spec.crawl.bloomFilter's default) and at 0.0001 (its lowest rate) -- a fresh
``redis-server`` (started here, stopped afterwards) gets one crawl job registered as the operator
registers it (``build_job_config`` of a ScrapeJob with ``crawl.maxPages`` N; the Bloom filter sized for
N), and N distinct URLs of 60-100 characters are offered through the queue client's
``enqueue_discovered`` -- the call a worker makes for the links it found -- in batches of ``--batch``
links (a few pages' worth), ``--clients`` calls at a time. Measured:

* bytes per seen URL: ``MEMORY USAGE key SAMPLES 1000`` of the job's dedupe key (the set, or the filter
  string) / N -- what stays until retention -- and the whole frontier (``used_memory`` after minus before,
  every URL still pending in the ready list) / N. A sampled figure is Redis's estimate (the table and
  dict entries counted, the members' size taken from 1,000 of them), which for a set of equal 12-byte
  digests is the walked figure; a set of at most 500,000 members is walked as well and the two must agree
  within 1 %. Walking a 3.3 M-member set (``SAMPLES 0``) blocks the server for over half a second, past a
  loaded cluster node's timeout;
* pages skipped while filling: N minus the URLs added (0 for the exact tier), beside the job's
  ``possiblySkipped`` (the scripts' expected count, status.dedupe);
* false-positive rate at the filter's full load: the filter is read back and ``--probes`` never-seen URLs
  are tested against it with the script's own bit positions (trawl.queue.bloom.contains; checked first on
  inserted URLs, which must all hit) -- against the configured rate and the rate the sizing predicts;
* throughput: URLs offered per second (wall, loaded machine) and Redis CPU microseconds per URL.

Then (unless ``--no-crawl``) a real crawl: bench/crawl_throughput.py's static bookstore behind nginx
and one ``trawl worker`` process, the same job with exact dedupe and with a Bloom filter at 0.0001 for
``maxPages`` 1,000,000 (the filter a million-page crawl gets), interleaved ``--repeat`` times, the tier that
goes first alternating (ABBA): pages/s and CPU per page.

With ``--crawl-pages N [N ...]`` only a crawl of a generated site of N pages runs instead (bench/crawl_site.py:
each page made from its path by a small asyncio server in its own process, ~10 links a page of which ~9 lead
to pages already offered, product fields extracted from every page): one ``trawl worker`` process, one fresh
``redis-server``, a ScrapeJob's job with ``crawl.maxPages`` N, exact dedupe vs a Bloom filter at 0.0001 sized
for N (``--tiers``), ``--repeat`` rounds (default 1) interleaved ABBA. Per crawl: pages crawled (the job's
succeeded, and the distinct pages the site served) against N and the filter's expected skips; pages/s and CPU
ms per page of the worker, Redis and the site over the middle 80 % of the pages (from the job's counter and the
processes' CPU, sampled every 0.5 s); Redis ``used_memory`` at the end, the dedupe key's bytes per URL and the
job's biggest keys; the newest 200 records checked against the pages' fields. Last line: ``site_crawl_pages=N
steady_pages_ratio=... cpu_per_page_ratio=... redis_cpu_ratio=... exact_complete=...`` (Bloom over exact, the
largest N).

The exact tier at 10 M needs ~2.5 GB of Redis with every URL pending; a size whose estimate does not fit in
half the free memory (``free``) is skipped with the reason, and the exact tier's cost extrapolated.

    .venv/bin/python bench/frontier.py              # 100 k, 1 M and 10 M; the crawl comparison
    .venv/bin/python bench/frontier.py --quick      # 100 k only, a short crawl
    .venv/bin/python bench/frontier.py --sizes 1000000 --no-crawl
    .venv/bin/python bench/frontier.py --crawl-only --repeat 5
    .venv/bin/python bench/frontier.py --crawl-pages 10000 100000 --repeat 2   # a generated site, exact vs Bloom
    nice -n 10 .venv/bin/python bench/frontier.py --crawl-pages 1000000         # 1 M pages: ~15 min a tier
    .venv/bin/python bench/frontier.py --cluster 3 --no-crawl   # one crawl over a 3-master Redis Cluster
    .venv/bin/python bench/frontier.py --cluster 3 --no-crawl --sizes 10000000 --tiers exact 0.0001

With ``--cluster N`` the same sizes and tiers run on a real Redis Cluster of N masters (no replicas; started
and stopped per measurement), the job on a pool of N shards (``spec.redis.shards``, the queue client the
worker uses there): the URLs spread over the shards by URL, each shard keeps its own dedupe (an exact set of
its share, or a filter sized for the whole ``maxPages``). The bench's cluster has a node timeout of 15 s
(not the test cluster's 1.5 s): with no replicas there is nothing to fail over, and a master starved of the
CPU on a loaded machine must not be declared failed mid-run. Bytes are summed over the masters, beside the
fullest shard's share; the false-positive rate is measured as the crawl sees it (a fresh URL tested only
against its own shard's filter); Redis CPU is the masters' sum. Of the URLs a Bloom tier skipped, those in no
shard's filter were refused for the quota (never examined), not skipped as seen: printed as "refused by the
quota" (0 expected: issue 37's fix offers them again until no shard has quota left).

The last line: ``bloom_bytes_per_url_1e-4=... exact_bytes_per_url=... fp_measured=... fp_configured=...
throughput_ratio_1M=... redis_cpu_ratio_1M=... crawl_pages_ratio=...`` (Bloom at 0.0001 at the largest size
run; the ratios are Bloom 0.0001 over exact at 1 M, or at the largest size below it: URLs/s, and Redis CPU
per URL, which a loaded machine disturbs less).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.dev.redis_server import RedisServer
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.bloom import BloomSize, contains, false_positive_rate
from trawl.queue.model import Task
from trawl.queue.sharded import ShardedQueue, shard_of

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "trawl:{bench/frontier}"
JOB = "crawl"
TIERS: tuple[float | None, ...] = (None, 0.001, 0.0001)
SECTIONS = ("catalogue", "products/category", "blog/2025/archive", "help/articles", "news/world", "shop")
WORDS = ("garden", "kitchen-and-dining", "outdoor-furniture", "electronics", "travel-guides", "books", "toys")
# Redis bytes per URL of the exact tier with every URL pending (measured: ~150 ready list + ~65 set),
# with room for the allocator's peaks: what a size must fit in before it is run.
EXACT_ESTIMATE_BYTES = 260
# MEMORY USAGE samples this many members of a set (SAMPLES 0 walks all of them: 572 ms for 3.4 M members on
# a quiet machine, which at load 6-9 blocked a cluster master past its node timeout and lost the cluster).
# The dedupe set's members are equal 12-byte digests, so the estimate is the walked figure (checked at
# 3.4 M members: SAMPLES 5, 1000, 10000 and 0 all give 186,331,752 bytes).
DEDUPE_SAMPLES = 1000
# A set of at most this many members is walked as well, and the estimate must agree with it.
WALK_MAX_MEMBERS = 500_000
# The bench's own Redis Cluster: no replicas, so nothing to fail over; a master starved of the CPU on a loaded
# 2-core machine (or busy with a long command) must not be declared failed and take the cluster down mid-run.
BENCH_NODE_TIMEOUT_MS = 15_000


def url_of(i: int, tag: str) -> str:
    """The i-th distinct URL of a family ``tag``: 60-100 characters, several hosts and path shapes."""
    query = f"?page={i % 13}&sort=price" if i % 3 == 0 else ""
    return (
        f"https://shop{i % 7}.{tag}.example.com/{SECTIONS[i % 6]}/{WORDS[(i // 6) % 7]}/"
        f"{WORDS[(i // 42) % 7]}-item-{i}.html{query}"
    )


def batches(n: int, size: int, tag: str) -> Iterator[list[str]]:
    for start in range(0, n, size):
        yield [url_of(i, tag) for i in range(start, min(n, start + size))]


def tier_name(rate: float | None) -> str:
    return "exact" if rate is None else f"bloom {rate:g}"


@dataclass
class Result:
    size: int
    tier: str
    dedupe_bytes: int
    frontier_bytes: int
    added: int
    expected_skips: float
    seconds: float
    redis_cpu: float
    fp_measured: float | None = None
    fp_configured: float | None = None
    fp_predicted: float | None = None
    filter_hashes: int = 0
    shards: int = 1
    fullest_share: float = 1.0  # the fullest shard's share of the dedupe bytes (1 on one server)
    refused: int | None = None  # of the skipped, those in no filter: refused for the quota (sharded Bloom tier)

    @property
    def per_url(self) -> float:
        return self.dedupe_bytes / self.size

    @property
    def urls_per_s(self) -> float:
        return self.size / self.seconds


async def redis_cpu(r: aioredis.Redis) -> float:
    info = await r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def used_memory(r: aioredis.Redis) -> int:
    return int((await r.info("memory"))["used_memory"])


async def dedupe_usage(r: Any, key: str) -> int:
    """Redis's memory for a dedupe key, sampled (see DEDUPE_SAMPLES); a small set is walked too, to check."""
    sampled = int(await r.memory_usage(key, samples=DEDUPE_SAMPLES) or 0)
    if await r.type(key) in (b"set", "set") and await r.scard(key) <= WALK_MAX_MEMBERS:
        walked = int(await r.memory_usage(key, samples=0) or 0)
        if abs(sampled - walked) > walked / 100:
            raise SystemExit(f"MEMORY USAGE of {key}: {sampled} sampled, {walked} walked: the estimate is off")
    return sampled


async def register(q: Queue, n: int, rate: float | None) -> BloomSize | None:
    """The job as the operator registers a crawl of maxPages n (the Bloom filter sized for n)."""
    crawl: dict[str, Any] = {"maxPages": n, "maxDepth": 100}
    if rate is not None:
        crawl["bloomFilter"] = {"falsePositiveRate": rate}
    spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://shop0.seed.example.com/"], "crawl": crawl})
    config = build_job_config(JOB, spec, None)
    await q.register_job(config)
    bloom: BloomSize | None = config.bloom
    return bloom


async def offer(q: Queue, n: int, batch: int, clients: int, tag: str) -> int:
    """Offer n distinct URLs as workers' discovered links, ``clients`` calls at a time; returns those added."""
    parent = Task(JOB, "t0", "https://shop0.seed.example.com/", 0, 1, 0.0)
    added = 0
    pending: set[asyncio.Task[int]] = set()
    for urls in batches(n, batch, tag):
        pending.add(asyncio.ensure_future(q.enqueue_discovered(parent, urls)))
        if len(pending) >= clients:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            added += sum(t.result() for t in done)
    if pending:
        added += sum(await asyncio.gather(*pending))
    return added


def probe(filter_bytes: bytes, size: BloomSize, n: int, probes: int) -> float:
    """The filter's false-positive rate on ``probes`` never-seen URLs; inserted URLs must all hit first."""
    step = max(1, n // 10_000)
    missed = [i for i in range(0, n, step) if not contains(filter_bytes, url_of(i, "seen"), size)]
    if missed:
        raise SystemExit(f"the filter misses inserted URLs (e.g. {url_of(missed[0], 'seen')}): positions differ")
    hits = sum(contains(filter_bytes, url_of(i, "fresh"), size) for i in range(probes))
    return hits / probes


async def measure(n: int, rate: float | None, args: argparse.Namespace) -> Result:
    with RedisServer() as server:
        r = aioredis.Redis.from_url(server.url)
        q = Queue(r, PREFIX)
        await warm_up(q)
        before = await used_memory(r)
        size = await register(q, n, rate)
        cpu0, t0 = await redis_cpu(r), time.perf_counter()
        added = await offer(q, n, args.batch, args.clients, "seen")
        seconds, cpu = time.perf_counter() - t0, await redis_cpu(r) - cpu0
        frontier = await used_memory(r) - before
        key = q.keys.seen(JOB) if size is None else q.keys.bloom(JOB)
        stats = await q.job_stats(JOB)
        result = Result(
            n, tier_name(rate), await dedupe_usage(r, key), frontier, added,
            stats.possibly_skipped, seconds, cpu,
        )  # fmt: skip
        if size is not None and rate is not None:
            filter_bytes = await r.get(key) or b""
            result.fp_measured = probe(filter_bytes, size, n, args.probes)
            result.fp_configured, result.fp_predicted = rate, false_positive_rate(size, added)
            result.filter_hashes = size.hashes
        await r.aclose()
    return result


async def measure_cluster(n: int, rate: float | None, args: argparse.Namespace) -> Result:
    """:func:`measure` on a Redis Cluster of ``args.cluster`` masters, the job on as many shards."""
    from redis.asyncio.cluster import RedisCluster

    bench = LocalRedisCluster(masters=args.cluster, replicas_per_master=0, node_timeout_ms=BENCH_NODE_TIMEOUT_MS)
    with bench as cluster:
        nodes = [cluster.client(port) for port in cluster.ports]
        r = RedisCluster.from_url(cluster.url)
        q = ShardedQueue(r, PREFIX, shards=args.cluster)
        await warm_up(q)
        before = sum(int(c.info("memory")["used_memory"]) for c in nodes)
        size = await register(q, n, rate)
        cpu0, t0 = sum_cpu(nodes), time.perf_counter()
        added = await offer(q, n, args.batch, args.clients, "seen")
        seconds, cpu = time.perf_counter() - t0, sum_cpu(nodes) - cpu0
        frontier = sum(int(c.info("memory")["used_memory"]) for c in nodes) - before
        keys = [s.keys.seen(JOB) if size is None else s.keys.bloom(JOB) for s in q.shards]
        per_shard = [await dedupe_usage(r, key) for key in keys]
        stats = await q.job_stats(JOB)
        result = Result(
            n, tier_name(rate), sum(per_shard), frontier, added, stats.possibly_skipped, seconds, cpu,
            shards=args.cluster, fullest_share=max(per_shard) / max(1, sum(per_shard)),
        )  # fmt: skip
        if size is not None and rate is not None:
            filters = [await r.get(key) or b"" for key in keys]
            result.fp_measured = probe_sharded(filters, size, n, args.probes)
            result.refused = absent_from(filters, size, n, n - added)
            result.fp_configured, result.fp_predicted = rate, false_positive_rate(size, added // args.cluster)
            result.filter_hashes = size.hashes
        await r.aclose()
        for c in nodes:
            c.close()
    return result


def sum_cpu(nodes: list[Any]) -> float:
    return sum(float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in (c.info("cpu") for c in nodes))


def absent_from(filters: list[bytes], size: BloomSize, n: int, skipped: int) -> int:
    """How many of the n offered URLs are in no shard's filter: the skipped ones the quota refused. A link the
    cap refused is never examined (its bits are not set), one skipped as a duplicate hit its filter; a refused
    link whose bits others set (at the shard's own rate, ~1e-6 here) would count as a duplicate."""
    shards = len(filters)
    urls = (url_of(i, "seen") for i in range(n))
    absent = sum(not contains(filters[shard_of(url, shards)], url, size) for url in urls)
    if absent > skipped:
        raise SystemExit(f"{absent} offered URLs in no filter but {skipped} skipped: bit positions differ")
    return absent


def probe_sharded(filters: list[bytes], size: BloomSize, n: int, probes: int) -> float:
    """The crawl's false-positive rate over shards: each URL is only ever tested against its own shard's filter."""
    step, shards = max(1, n // 10_000), len(filters)
    for i in range(0, n, step):
        if not contains(filters[shard_of(url_of(i, "seen"), shards)], url_of(i, "seen"), size):
            raise SystemExit(f"a shard's filter misses an inserted URL ({url_of(i, 'seen')}): positions differ")
    fresh = (url_of(i, "fresh") for i in range(probes))
    return sum(contains(filters[shard_of(url, shards)], url, size) for url in fresh) / probes


async def warm_up(q: Queue) -> None:
    """Scripts loaded and the server's buffers grown at these batch sizes, then gone: a clean baseline."""
    await q.register_job(build_job_config("warm", warm_spec(), None))
    await q.enqueue_discovered(
        Task("warm", "t0", "https://w.example.com/", 0, 1, 0.0), [url_of(i, "w") for i in range(5000)]
    )
    await q.cancel("warm")


def warm_spec() -> ScrapeJobSpec:
    crawl = {"maxPages": 10_000, "maxDepth": 3, "bloomFilter": {"falsePositiveRate": 0.001}}
    return ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://w.example.com/"], "crawl": crawl})


def free_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def fits(n: int) -> str | None:
    """None when the exact tier at n fits in half the available memory, else why it is skipped."""
    need, avail = n * EXACT_ESTIMATE_BYTES // 2**20, free_mb()
    return None if need * 2 <= avail else f"needs ~{need} MB of Redis, {avail} MB available (half is the bound)"


def print_row(res: Result) -> None:
    fp = ""
    if res.fp_measured is not None:
        fp = f" fp {res.fp_measured:.2e} (configured {res.fp_configured:g}, predicted {res.fp_predicted:.2e}"
        fp += f", k={res.filter_hashes})"
    print(
        f"  {res.size:>10,} {res.tier:12} dedupe {res.per_url:6.2f} B/URL ({res.dedupe_bytes / 2**20:7.1f} MB),"
        f" frontier {res.frontier_bytes / res.size:6.1f} B/URL; skipped {res.size - res.added} (expected"
        f" {res.expected_skips:.1f}{'' if res.refused is None else f'; {res.refused} refused by the quota'});"
        f" {res.urls_per_s:,.0f} URLs/s, {res.redis_cpu / res.size * 1e6:.2f} µs Redis"
        f" CPU/URL{fp}{'' if res.shards == 1 else f'; fullest shard {res.fullest_share:.0%} of the dedupe bytes'}",
        flush=True,
    )


def run_sizes(args: argparse.Namespace) -> list[Result]:
    results = []
    for n in args.sizes:
        for rate in args.tiers:
            reason = fits(n) if rate is None else None
            if reason:
                print(f"  {n:>10,} exact        skipped: {reason}", flush=True)
                continue
            res = asyncio.run(measure_cluster(n, rate, args) if args.cluster else measure(n, rate, args))
            print_row(res)
            results.append(res)
    return results


def crawl_ratio(args: argparse.Namespace) -> float:
    """A real crawl (one worker, nginx, the bookstore), exact vs Bloom 0.0001 for maxPages 1 M, interleaved ABBA:
    the median pages/s, Bloom over exact, and beside it CPU per page (worker and Redis; Redis alone), which
    a loaded machine disturbs less than the wall clock."""
    import shutil
    import tempfile
    from pathlib import Path

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from crawl_throughput import Nginx, build_site, run_trawl

    tmp = Path(tempfile.mkdtemp(prefix="trawl-frontier-"))
    runs: dict[str, list[tuple[float, float, float]]] = {"exact": [], "bloom": []}
    try:
        pages = build_site(tmp / "site", args.products)
        nginx = Nginx(tmp / "site", tmp).start()
        try:
            base = f"http://127.0.0.1:{nginx.port}"
            tiers: list[tuple[str, dict[str, Any] | None]] = [
                ("exact", None),
                ("bloom", {"bloomFilter": {"falsePositiveRate": 0.0001}}),
            ]
            for round_ in range(args.repeat):
                # ABBA: the tier that goes first alternates, so a load that rises (or falls) through the run
                # does not always favour the same one.
                for name, crawl in tiers if round_ % 2 == 0 else tiers[::-1]:
                    r = asyncio.run(run_trawl(base, tmp, pages, "trawl", crawl=crawl))
                    n = r["pages"]
                    runs[name].append(
                        (n / r["seconds"], (r["cpu"] + r["redis_cpu"]) / n * 1e3, r["redis_cpu"] / n * 1e3)
                    )
                    pps, cpu, rcpu = runs[name][-1]
                    load = os.getloadavg()[0]
                    print(
                        f"  crawl {name}: {n} pages, {pps:.1f} pages/s, {cpu:.2f} ms CPU/page ({rcpu:.3f} Redis)"
                        f" (load {load:.1f})",
                        flush=True,
                    )
        finally:
            nginx.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {name: [statistics.median(x[i] for x in rs) for i in range(3)] for name, rs in runs.items()}
    (e_pps, e_cpu, e_rcpu), (b_pps, b_cpu, b_rcpu) = med["exact"], med["bloom"]
    print(
        f"crawl of {pages} pages, median of {args.repeat}: exact {e_pps:.1f} pages/s {e_cpu:.2f} ms CPU/page"
        f" ({e_rcpu:.3f} Redis), bloom 0.0001 {b_pps:.1f} pages/s {b_cpu:.2f} ms ({b_rcpu:.3f} Redis);"
        f" crawl_cpu_ratio={b_cpu / e_cpu:.2f} crawl_redis_cpu_ratio={b_rcpu / e_rcpu:.2f}"
    )
    return b_pps / e_pps


# --- a crawl of a generated site of N pages (--crawl-pages) ---------------------------------------------

SAMPLE_EVERY = 0.5  # seconds between the bench's samples of the job's progress and the processes' CPU
PROGRESS_EVERY = 120  # samples (a minute) between progress lines of a crawl
STALL_SECONDS = 180.0  # no page done for this long: the crawl is stuck, stop with the worker's log


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic seconds
    done: int  # pages succeeded so far (the job's counter)
    worker: float  # CPU seconds: the worker and its parser processes
    redis: float
    site: float


@dataclass(frozen=True)
class Steady:
    pages_per_s: float
    worker_ms: float  # CPU ms per page over the window
    redis_ms: float
    site_ms: float


def crossing(samples: list[Sample], pages: float) -> Sample:
    """The moment the job's done count reached ``pages``, every figure linear between the two samples around it."""
    for before, after in itertools.pairwise(samples):
        if after.done < pages:
            continue
        if before.done >= pages or after.done == before.done:
            return before if before.done >= pages else after
        w = (pages - before.done) / (after.done - before.done)
        at, worker, redis, site = (a + (b - a) * w for a, b in zip(
            (before.at, before.worker, before.redis, before.site),
            (after.at, after.worker, after.redis, after.site), strict=True))  # fmt: skip
        return Sample(at, round(pages), worker, redis, site)
    raise ValueError(f"the samples never reach {pages} pages (last {samples[-1].done if samples else 0})")


def steady(samples: list[Sample], total: int, lo: float = 0.10, hi: float = 0.90) -> Steady:
    """Pages/s and CPU per page over the middle of the crawl (from lo*total to hi*total pages done): without
    the worker's first claims and the tail where fewer pages than its concurrency are left."""
    a, b = crossing(samples, lo * total), crossing(samples, hi * total)
    pages = (hi - lo) * total
    if b.at <= a.at or pages <= 0:
        raise ValueError("an empty steady window")
    return Steady(
        pages / (b.at - a.at),
        (b.worker - a.worker) / pages * 1e3,
        (b.redis - a.redis) / pages * 1e3,
        (b.site - a.site) / pages * 1e3,
    )


@dataclass
class SiteCrawl:
    pages: int  # N, the site's pages and the job's maxPages
    tier: str
    crawled: int  # the job's succeeded
    dead: int
    distinct: int  # distinct pages the site served
    repeats: int  # pages the site served again
    possibly_skipped: float
    seconds: float  # seed enqueued to the job finished
    steady: Steady
    cpu_ms: float  # worker + Redis CPU ms per page over the whole crawl
    used_memory: int  # Redis used_memory at the end (job finished, its keys not yet expired)
    dedupe_bytes: int  # MEMORY USAGE of the job's dedupe key (the set, or the filter)
    keys: dict[str, int]  # the job's keys (their suffix) by MEMORY USAGE, the biggest
    load: tuple[float, float]  # 1-min load average at the start and at the end
    records_checked: int  # records read back and compared with the page's fields
    worker_rss_mb: float  # the worker process's peak resident memory (VmHWM; its parser processes not counted)

    @property
    def skipped(self) -> int:
        return self.pages - self.crawled


def crawl_spec(n: int, base: str, rate: float | None) -> ScrapeJobSpec:
    """A ScrapeJob's spec for the generated site: crawl.maxPages n, the product fields extracted from every page,
    robots.txt off and the limiter set high as bench/crawl_throughput.py does (one host: its politeness is not
    measured here), exact dedupe or a Bloom filter at ``rate`` (sized by the operator for n)."""
    from crawl_site import FIELDS

    crawl: dict[str, Any] = {"maxPages": n, "maxDepth": 100}
    if rate is not None:
        crawl["bloomFilter"] = {"falsePositiveRate": rate}
    return ScrapeJobSpec.model_validate(
        {
            "pool": "crawl",
            "urls": [base + "/p/0"],
            "crawl": crawl,
            "extract": {"fields": [{"name": k, "selector": v} for k, v in FIELDS.items()], "title": False},
            "politeness": {
                "respectRobotsTxt": False,
                "requestsPerSecond": 10000,
                "maxConcurrencyPerDomain": 1000,
                "adaptiveDelay": False,
            },
        }
    )


async def job_keys(r: aioredis.Redis, prefix: str, job_id: str) -> dict[str, int]:
    """The job's keys by MEMORY USAGE (sampled), named by what follows the job id."""
    out: dict[str, int] = {}
    async for key in r.scan_iter(match=f"{prefix}*{job_id}*", count=1000):
        out[key.decode().removeprefix(prefix).strip(":")] = int(await r.memory_usage(key, samples=DEDUPE_SAMPLES) or 0)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def peak_rss_mb(pid: int) -> float:
    """A live process's peak resident set (VmHWM) in MB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def site_stats(port: int) -> dict[str, int]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__/stats", timeout=30) as reply:
        stats: dict[str, int] = json.loads(reply.read())
    return stats


async def check_records(r: aioredis.Redis, key: str, n: int, count: int = 200) -> int:
    """The newest ``count`` records of the job's stream against the fields of the page they came from."""
    from urllib.parse import urlsplit

    from crawl_site import fields_of, page_index

    checked = 0
    for _id, entry in await r.xrevrange(key, count=count):
        data = json.loads(entry[b"data"])
        i = page_index(urlsplit(data["url"]).path, n)
        expected = fields_of(i) if i is not None else None
        got = {k: data.get(k) for k in (expected or {})}
        if expected is None or got != expected:
            raise SystemExit(f"record of {data['url']}: {got} (expected {expected})")
        checked += 1
    return checked


async def crawl_site_once(n: int, rate: float | None, tmp: Any) -> SiteCrawl:
    """One crawl of the generated n-page site: its server, a fresh redis-server, one ``trawl worker`` process."""
    from crawl_throughput import CONCURRENCY, proc_cpu, tree_cpu
    from trawl.dev import procs
    from trawl.queue.keys import Keys

    load0 = os.getloadavg()[0]
    port = procs.free_port()
    site = procs.start([sys.executable, os.path.join(HERE, "crawl_site.py"), "--pages", str(n), "--port", str(port)],
                       log_path=tmp / "site.log")  # fmt: skip
    prefix, job_id = "trawl:{bench/sitecrawl}", f"site{n}"
    try:
        procs.wait_for_port("127.0.0.1", port, 15, site)
        base = f"http://127.0.0.1:{port}"
        with RedisServer() as server:
            r = aioredis.Redis.from_url(server.url)
            q = Queue(r, prefix)
            await q.register_job(build_job_config(job_id, crawl_spec(n, base, rate), None))
            argv = [
                sys.executable, "-m", "trawl.cli", "worker", "--redis-url", server.url, "--prefix", prefix,
                "--concurrency", str(CONCURRENCY), "--allowed-cidrs", "127.0.0.1/32", "--worker-id", "bench",
                "--log-level", "WARNING", "--parse-processes", "2", "--parse-inline-max-tags", "2048",
            ]  # fmt: skip
            log_path = tmp / "worker.log"
            worker = procs.start(argv, log_path=log_path, env=dict(os.environ))
            redis_pid = server.proc.pid  # type: ignore[union-attr]
            try:
                deadline = time.monotonic() + 60  # the worker registers as "bench@<random>"
                while not any(k.decode().split("@", 1)[0] == "bench" for k in await r.hkeys(Keys(prefix).worker_info)):
                    if worker.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("trawl worker did not start:\n" + log_path.read_text()[-3000:])
                    await asyncio.sleep(0.05)

                def sample(done: int) -> Sample:
                    return Sample(time.monotonic(), done, tree_cpu(worker.pid), proc_cpu(redis_pid),
                                  proc_cpu(site.pid))  # fmt: skip

                samples = [sample(0)]
                await q.enqueue(job_id, [base + "/p/0"])
                await q.mark_enqueue_done(job_id)
                while True:
                    await asyncio.sleep(SAMPLE_EVERY)
                    stats = await q.job_stats(job_id)
                    samples.append(sample(stats.succeeded + stats.dead))
                    if stats.finished:
                        break
                    if len(samples) % PROGRESS_EVERY == 1:  # a long crawl's figures so far, window by window
                        a, b = samples[-PROGRESS_EVERY - 1], samples[-1]
                        pages = max(1, b.done - a.done)
                        print(
                            f"    {tier_name(rate)}: {b.done:,}/{n:,} pages, {pages / (b.at - a.at):.0f} pages/s,"
                            f" {(b.worker - a.worker + b.redis - a.redis) / pages * 1e3:.3f} ms CPU/page worker+Redis"
                            f" (Redis {(b.redis - a.redis) / pages * 1e3:.3f}) in the last {b.at - a.at:.0f} s;"
                            f" load {os.getloadavg()[0]:.1f}",
                            flush=True,
                        )
                    if worker.poll() is not None:
                        raise SystemExit("trawl worker died:\n" + log_path.read_text()[-3000:])
                    stalled = [s for s in samples if s.at >= samples[-1].at - STALL_SECONDS]
                    if samples[-1].at - samples[0].at > STALL_SECONDS and stalled[0].done == samples[-1].done:
                        raise SystemExit(f"no page done in {STALL_SECONDS:.0f} s at {samples[-1].done}/{n}: {stats}")
                end = samples[-1]
                used = await used_memory(r)
                keys = Keys(prefix)
                dedupe = await dedupe_usage(r, keys.seen(job_id) if rate is None else keys.bloom(job_id))
                by_key = await job_keys(r, prefix, job_id)
                checked = await check_records(r, keys.results(job_id), n)
                worker_rss = peak_rss_mb(worker.pid)
            finally:
                procs.stop(worker, timeout=20)
            served = site_stats(port)
            await r.aclose()
    finally:
        procs.stop(site, timeout=10)
    return SiteCrawl(
        n, tier_name(rate), stats.succeeded, stats.dead, served["distinct"], served["repeats"],
        stats.possibly_skipped, end.at - samples[0].at, steady(samples, stats.succeeded + stats.dead),
        (end.worker - samples[0].worker + end.redis - samples[0].redis) / max(1, stats.succeeded) * 1e3,
        used, dedupe, by_key, (load0, os.getloadavg()[0]), checked, worker_rss,
    )  # fmt: skip


def print_site_crawl(c: SiteCrawl) -> None:
    s = c.steady
    top = ", ".join(f"{k} {v / 2**20:.1f} MB" for k, v in list(c.keys.items())[:4])
    print(
        f"  site crawl {c.pages:>9,} {c.tier:12}: {c.crawled:,} pages crawled ({c.dead} dead; site served"
        f" {c.distinct:,} distinct, {c.repeats} again), skipped {c.skipped} (expected {c.possibly_skipped:.1f});"
        f" {c.seconds:.1f} s; steady {s.pages_per_s:.0f} pages/s, CPU ms/page worker {s.worker_ms:.3f}"
        f" Redis {s.redis_ms:.3f} site {s.site_ms:.3f}; whole run {c.cpu_ms:.3f} ms worker+Redis;"
        f" Redis used_memory {c.used_memory / 2**20:.1f} MB, dedupe {c.dedupe_bytes / c.pages:.2f} B/URL"
        f" ({c.dedupe_bytes / 2**20:.1f} MB); keys: {top}; worker peak RSS {c.worker_rss_mb:.0f} MB;"
        f" {c.records_checked} records checked;"
        f" load {c.load[0]:.1f} -> {c.load[1]:.1f}",
        flush=True,
    )


def site_crawls(args: argparse.Namespace) -> list[SiteCrawl]:
    """Each size of --crawl-pages, each tier, ``--repeat`` rounds interleaved ABBA (the tier that goes first
    alternates); a table of medians and the last line (the largest size: Bloom over exact)."""
    import shutil
    import tempfile
    from pathlib import Path

    from crawl_throughput import compile_bytecode

    compile_bytecode()
    runs: list[SiteCrawl] = []
    tmp = Path(tempfile.mkdtemp(prefix="trawl-sitecrawl-"))
    try:
        for n in args.crawl_pages:
            for round_ in range(args.repeat):
                for rate in args.tiers if round_ % 2 == 0 else args.tiers[::-1]:
                    runs.append(asyncio.run(crawl_site_once(n, rate, tmp)))
                    print_site_crawl(runs[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        "| pages | dedupe | runs | pages crawled (skipped, expected) | steady pages/s | CPU ms/page worker |"
        " Redis | site | Redis used_memory MB | dedupe B/URL | worker peak RSS MB |"
        "\n|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    medians: dict[tuple[int, str], tuple[float, float, float]] = {}
    for n in args.crawl_pages:
        for rate in args.tiers:
            rs = [c for c in runs if c.pages == n and c.tier == tier_name(rate)]
            m = [statistics.median(f(c) for c in rs) for f in (
                lambda c: c.steady.pages_per_s, lambda c: c.steady.worker_ms, lambda c: c.steady.redis_ms,
                lambda c: c.steady.site_ms, lambda c: c.used_memory / 2**20, lambda c: c.dedupe_bytes / c.pages,
                lambda c: c.worker_rss_mb,
            )]  # fmt: skip
            medians[n, tier_name(rate)] = (m[0], m[1] + m[2], m[2])
            crawled = ", ".join(f"{c.crawled:,} ({c.skipped}, {c.possibly_skipped:.1f})" for c in rs)
            print(
                f"| {n:,} | {tier_name(rate)} | {len(rs)} | {crawled} | {m[0]:,.0f} | {m[1]:.3f} | {m[2]:.3f} |"
                f" {m[3]:.3f} | {m[4]:.1f} | {m[5]:.2f} | {m[6]:.0f} |"
            )
    n = max(args.crawl_pages)
    e, b = medians.get((n, "exact")), medians.get((n, "bloom 0.0001"))
    complete = all(c.crawled == c.pages for c in runs if c.tier == "exact")
    if e and b:
        print(
            f"site_crawl_pages={n} steady_pages_ratio={b[0] / e[0]:.2f} cpu_per_page_ratio={b[1] / e[1]:.2f}"
            f" redis_cpu_ratio={b[2] / e[2]:.2f} exact_complete={complete}"
        )
    return runs


def summary(results: list[Result], crawl: float | None) -> str:
    """The last line; a figure whose tier (or size) was not run (``--tiers``, ``--sizes``) is n/a."""
    bloom4 = [r for r in results if r.tier == "bloom 0.0001"]
    exact = [r for r in results if r.tier == "exact"]
    top = max(bloom4, key=lambda r: r.size, default=None)
    at = max((r.size for r in exact if r.size <= 1_000_000 and any(b.size == r.size for b in bloom4)), default=None)
    label = "1M" if at == 1_000_000 else str(at)
    ratios = "throughput_ratio_1M=n/a"
    if at is not None:  # Bloom 0.0001 over exact: URLs/s (wall, loaded), and Redis CPU per URL
        e = next(r for r in exact if r.size == at)
        b = next(r for r in bloom4 if r.size == at)
        cpu = (b.redis_cpu / b.size) / (e.redis_cpu / e.size)
        ratios = f"throughput_ratio_{label}={b.urls_per_s / e.urls_per_s:.2f} redis_cpu_ratio_{label}={cpu:.2f}"
    parts = [
        f"bloom_bytes_per_url_1e-4={top.per_url:.2f}" if top else "bloom_bytes_per_url_1e-4=n/a",
        f"exact_bytes_per_url={statistics.mean(r.per_url for r in exact):.1f}" if exact else "exact_bytes_per_url=n/a",
        f"fp_measured={top.fp_measured:.2e}" if top else "fp_measured=n/a",
        f"fp_configured={top.fp_configured:g}" if top else "fp_configured=n/a",
        ratios,
        f"crawl_pages_ratio={crawl:.2f}" if crawl else "crawl_pages_ratio=n/a",
    ]
    return " ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 k URLs only, 100 k probes, a 400-product crawl.")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="URL counts (default 100k 1M 10M).")
    ap.add_argument("--batch", type=int, default=200, help="Links per enqueue_discovered call (default 200).")
    ap.add_argument("--clients", type=int, default=4, help="Calls in flight at once (default 4).")
    ap.add_argument("--probes", type=int, default=None, help="Fresh URLs tested per filter (default 1,000,000).")
    ap.add_argument("--no-crawl", action="store_true", help="Skip the real crawl comparison.")
    ap.add_argument("--crawl-only", action="store_true", help="Only the real crawl comparison.")
    ap.add_argument("--products", type=int, default=None, help="Products of the crawled site (default 2000).")
    ap.add_argument(
        "--repeat", type=int, default=None, help="Interleaved crawl runs per tier (default 3; 1 with --crawl-pages)."
    )
    ap.add_argument(
        "--crawl-pages",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="Only crawls of a generated site of N pages (bench/crawl_site.py), crawl.maxPages N, exact vs "
        "Bloom 0.0001 (or --tiers), --repeat rounds interleaved.",
    )
    ap.add_argument("--tiers", nargs="+", default=None, help="Dedupe tiers: exact and/or Bloom rates (default all).")
    ap.add_argument("--cluster", type=int, default=0, help="Run the sizes on a Redis Cluster of N masters, N shards.")
    args = ap.parse_args()
    if args.tiers is None:
        args.tiers = (None, 0.0001) if args.crawl_pages else TIERS
    else:
        args.tiers = [None if t == "exact" else float(t) for t in args.tiers]
    args.repeat = args.repeat or (1 if args.crawl_pages else 3)
    if args.crawl_pages:
        load = os.getloadavg()
        print(
            f"site crawl: {args.crawl_pages} pages, {args.repeat} round(s); load {load[0]:.1f} on {os.cpu_count()} CPUs"
        )
        site_crawls(args)
        print(f"load average (1 min) at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}")
        return
    args.sizes = args.sizes or ([100_000] if args.quick else [100_000, 1_000_000, 10_000_000])
    args.probes = args.probes or (100_000 if args.quick else 1_000_000)
    args.products = args.products or (400 if args.quick else 2000)
    load = os.getloadavg()
    print(
        f"frontier: {args.batch} links per call, {args.clients} in flight; load {load[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"mean URL length {statistics.mean(len(url_of(i, 'seen')) for i in range(100_000)):.1f} characters")
    results = [] if args.crawl_only else run_sizes(args)
    crawl = None if args.no_crawl else crawl_ratio(args)
    print(f"load average (1 min) at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}")
    if results:
        print(summary(results, crawl))
    elif crawl is not None:
        print(f"crawl_pages_ratio={crawl:.2f}")


if __name__ == "__main__":
    main()
