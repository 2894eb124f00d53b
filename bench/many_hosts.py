#!/usr/bin/env python3
"""Politeness at many hosts (issue 37): does every host stay busy up to its own limit, with no host above it
and no slow or rate-limited host holding the others back? Trawl vs Scrapy on one farm of loopback hosts.

The farm (this script's ``--role farm``, in its own process: a minimal HTTP/1.1 keep-alive server,
bench/farm_server.py) listens on one port of the any-address and answers every host ``127.1.x.y`` of
``bench/host_farm.py`` (only loopback peers are served): each host's latency by its kind (fast, slow,
rate-limited hard: see host_farm), a small page with an ``<h1>``, and a log of every request: (host, arrival
time, requests of that host in flight, time its handler ran). The arrival time is the kernel's receive
timestamp of the request (``SO_TIMESTAMPNS``, read with ``recvmsg``, on the monotonic clock), not the farm
loop's reading of it: the farm shares the machine with the crawler and Redis, and its loop stalls.

Per size (``--hosts``, default 10, 100, 1,000, 10,000) and crawler:

1. *its cap*: the crawler fetches the farm's pages with no latency and no per-host limit for
   ``--cap-seconds`` (Trawl: politeness 10,000 requests/s and 1,000 at a time; Scrapy: no delay, per-domain
   concurrency = ``--concurrency``), before and again after its polite run; the larger of the two
   pages/s (the machine is shared: the less disturbed run) is what this crawler can do on this machine.
   The bare loop (asyncio + aiohttp + selectolax, ``--concurrency`` at once) is measured the same way, for
   reference: it extracts nothing and keeps no queue;
2. *its polite run*: the same URL list for every crawler, shuffled (seeded): every host enough pages for
   ``--seconds`` at its allowed rate (scaled down where the cap binds, 3x headroom:
   host_farm.pages_per_host); the crawler is stopped ``--seconds`` after the farm saw its first request;
3. the farm's log of the polite run gives the *achieved* pages/s (requests that arrived in the last 80 % of
   the window: the first 20 % is start-up), the *violations* (host_farm.violations, on the kernel's arrival
   times; ``violations_handler_clock``: the same check on the handler's times, what a loop-clocked log
   counts; ``handler_delay_p99``/``_max``: how late the farm's handler was after the kernel) and the TCP connections
   the requests came on (``pages_per_connection``: keep-alive at work); Trawl's worker + Redis CPU per page
   is printed for the polite run and both cap runs (``cpu_ms_per_page``, ``cap_cpu_ms_per_page``).

Efficiency = achieved / theoretical, theoretical = min(sum over hosts of min(rate, concurrency / latency),
the crawler's cap): what a perfect scheduler with this crawler's per-page cost would get. Where the sum of
the limits binds, efficiency measures politeness alone (every host kept at its limit, none held back by
another); where the cap binds, it also measures what politeness costs per page.

* Trawl: one real redis-server and ``--workers`` ``trawl worker`` processes (default 1; each
  ``--concurrency``), two ScrapeJobs in one pool: the fast and slow hosts' pages (``requestsPerSecond 2``,
  ``maxConcurrencyPerDomain 2``) and the hard hosts' pages (0.5 and 1); robots.txt and the adaptive delay
  off, the farm's range allowed (``--allowed-cidrs 127.1.0.0/16``). With ``--workers 2`` (a pool's pods, one
  per core of a 2-core node) the cap runs and the polite run both use every worker: the cap is the
  machine's, not one process's, and every host's limit is shared by the workers through Redis (the
  violations check the workers' requests together; under ``--send-log`` their send logs are merged).
  ``--workers 1 --workers 2`` runs both per size (rows ``trawl`` and ``trawl_2w`` in the JSON). Scrapy is one
  process whatever ``--workers`` says: its politeness is per process, so two Scrapy processes would each
  keep a host at its limit (twice the limit together).
* Scrapy: one spider with the same URLs, ``SCHEDULER_PRIORITY_QUEUE =
  'scrapy.pqueues.DownloaderAwarePriorityQueue'`` (the setting Scrapy's docs give for crawling many domains
  in parallel), ``CONCURRENT_REQUESTS`` = ``--concurrency``, ``CONCURRENT_REQUESTS_PER_DOMAIN 2``,
  ``DOWNLOAD_DELAY 0.5`` with ``DOWNLOAD_DELAY_JITTER 0`` (its default draws delays down to half the
  setting: above the limit), the hard hosts in ``DOWNLOAD_SLOTS`` (concurrency 1, delay 2 s), AutoThrottle, robots.txt,
  cookies and retries off; in a child process.

Last line: ``hosts=… efficiency=… scrapy_efficiency=… violations=…`` (the largest size run; violations:
Trawl's, over every size), with ``send_violations=…`` under ``--send-log``: the same check on Trawl's own
send times (bench/sendlog), a cross-check of the farm's log from the other end. Exit status 1 when Trawl
had a violation in the farm's log.

    .venv/bin/python bench/many_hosts.py                  # 10, 100, 1,000, 10,000 hosts (~9 min)
    .venv/bin/python bench/many_hosts.py --hosts 1000     # one size
    .venv/bin/python bench/many_hosts.py --quick          # 10 and 1,000 hosts, 20 s windows
    .venv/bin/python bench/many_hosts.py --hosts 1000 --workers 1 --workers 2   # one and two worker processes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO / "bench"))

from host_farm import (  # noqa: E402
    KINDS,
    Arrival,
    address,
    handler_clock,
    handler_delays,
    index_of,
    kind_of,
    limit_sum,
    pages_per_host,
    quantile,
    send_violations,
    theoretical,
    violations,
    window_rate,
)

PREFIX = "trawl:{bench/hosts}"
WARMUP = 0.2  # share of the window left out of the achieved rate (start-up)


# --- the farm -------------------------------------------------------------------------------------------


def farm_main(port_file: Path) -> None:
    from farm_server import Farm, StampedServer

    async def start() -> None:
        # The any-address: one socket answers every 127.1.x.y (loopback on Linux); other peers get a 404.
        server = StampedServer(Farm().handle, backlog=4096)
        port = await server.start("0.0.0.0", 0)
        port_file.with_suffix(".tmp").write_text(str(port))
        port_file.with_suffix(".tmp").rename(port_file)
        await asyncio.Event().wait()  # for as long as the farm runs

    asyncio.run(start())


async def farm_call(port: int, action: str) -> Any:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(f"http://127.0.0.1:{port}/__/{action}") as r:
        return await r.json()


async def farm_log(port: int) -> tuple[dict[int, list[Arrival]], list[float], int, int]:
    """The farm's log since the last call: per host its arrivals, the cap runs' arrival times, how many
    connections the polite requests came on, and how many requests came without a kernel timestamp."""
    raw = await farm_call(port, "log")
    hosts = {int(h): [Arrival(float(t), int(n), float(d)) for t, n, d in e] for h, e in raw["hosts"].items()}
    return hosts, raw["bare"], int(raw["connections"]), int(raw["unstamped"])


async def first_request(port: int, within: float = 120.0) -> float:
    """The run's first request's arrival (the kernel's, on the monotonic clock; waits for it)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        first = (await farm_call(port, "first"))["first"]
        if first is not None:
            return float(first)
        await asyncio.sleep(0.1)
    raise SystemExit("no request reached the farm")


# --- the URLs -------------------------------------------------------------------------------------------


def url_list(port: int, hosts: int, seconds: float, cap: float, seed: int = 37) -> list[str]:
    """The polite run's URLs: every host's pages (host_farm.pages_per_host), shuffled."""
    per_host = pages_per_host(hosts, seconds, cap)
    urls = [f"http://{address(i)}:{port}/p/{k}" for i in range(hosts) for k in range(per_host[i])]
    random.Random(seed).shuffle(urls)
    return urls


def cap_urls(port: int, hosts: int, count: int) -> list[str]:
    """A cap run's URLs: no latency, no limit, round-robin over the same hosts."""
    return [f"http://{address(n % hosts)}:{port}/bare/{n}" for n in range(count)]


def proc_cpu(pid: int) -> float:
    """CPU seconds of a process so far (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_counters(port: int) -> dict[str, Counter[str]]:
    """A worker's ``trawl_worker_late_sends_total`` (politeness.rate: strictly spaced requests that left too late
    after their token, one more rate round trip each) and ``trawl_worker_task_outcomes_total`` (``released``:
    tasks given back to the queue, each a release and a claim more), by outcome, from its metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, Counter[str]] = {"late_sends": Counter(), "outcomes": Counter()}
    for name, metric in (
        ("late_sends", "trawl_worker_late_sends_total{"),
        ("outcomes", "trawl_worker_task_outcomes_total{"),
    ):
        for line in text.splitlines():
            if line.startswith(metric):
                labels, value = line.rsplit(" ", 1)
                out[name][labels.split('outcome="', 1)[1].split('"', 1)[0]] += int(float(value))
    return out


def is_hard(url: str) -> bool:
    host = index_of(url.split("/")[2].rsplit(":", 1)[0])
    return host is not None and kind_of(host) == "hard"


# --- the bare loop --------------------------------------------------------------------------------------


def bare_main(urls_file: Path, concurrency: int) -> None:
    import aiohttp
    from selectolax.lexbor import LexborHTMLParser

    urls = iter(urls_file.read_text().split())

    async def run() -> None:
        conn = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
        async with aiohttp.ClientSession(connector=conn) as http:

            async def one() -> None:
                for url in urls:  # one iterator: each URL once
                    async with http.get(url) as resp:
                        body = await resp.read()
                    LexborHTMLParser(body).css_first("h1")

            await asyncio.gather(*(one() for _ in range(concurrency)))

    with contextlib.suppress(KeyboardInterrupt):  # how the controller stops it
        asyncio.run(run())


# --- Scrapy ---------------------------------------------------------------------------------------------


def scrapy_main(urls_file: Path, concurrency: int, polite: bool) -> None:
    import scrapy
    from scrapy.crawler import CrawlerProcess

    urls = urls_file.read_text().split()
    hard, fast = KINDS["hard"], KINDS["fast"]
    slots = {u.split("/")[2].rsplit(":", 1)[0] for u in urls if is_hard(u)}

    class Farm(scrapy.Spider):
        name = "farm"

        async def start(self) -> Any:
            for u in urls:
                yield scrapy.Request(u, callback=self.parse, dont_filter=True)

        def parse(self, response: Any) -> Any:
            yield {"h1": response.css("h1::text").get()}

    politeness: dict[str, Any] = {
        "CONCURRENT_REQUESTS_PER_DOMAIN": fast.concurrency,
        "DOWNLOAD_DELAY": 1 / fast.rate,
        "DOWNLOAD_DELAY_JITTER": 0,  # its default draws delays down to half the setting: above the limit
        "DOWNLOAD_SLOTS": {h: {"concurrency": hard.concurrency, "delay": 1 / hard.rate} for h in slots},
    }
    process = CrawlerProcess(
        settings={
            "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
            "CONCURRENT_REQUESTS": concurrency,
            **(politeness if polite else {"CONCURRENT_REQUESTS_PER_DOMAIN": concurrency, "DOWNLOAD_DELAY": 0}),
            "AUTOTHROTTLE_ENABLED": False,
            "ROBOTSTXT_OBEY": False,
            "COOKIES_ENABLED": False,
            "RETRY_ENABLED": False,
            "TELNETCONSOLE_ENABLED": False,
            "LOG_LEVEL": "ERROR",
        }
    )
    process.crawl(Farm)
    process.start()


def run_child(role: str, urls: list[str], args: argparse.Namespace, port: int, tmp: Path, polite: bool) -> float:
    """Run the bare loop or Scrapy over ``urls`` for ``--seconds`` (polite) or ``--cap-seconds`` after the
    farm's first request, then stop it; the first request's time."""
    urls_file = tmp / "urls.txt"
    urls_file.write_text("\n".join(urls))
    seconds = args.seconds if polite else args.cap_seconds
    argv = [sys.executable, __file__, "--role", role, "--urls", str(urls_file), "--concurrency", str(args.concurrency)]
    proc = subprocess.Popen([*argv, *([] if polite else ["--cap"])])
    try:
        first = asyncio.run(first_request(port))
        time.sleep(max(0.0, first + seconds + 0.5 - time.monotonic()))
    finally:
        proc.send_signal(signal.SIGINT)  # twice: Scrapy's second SIGINT stops without draining
        time.sleep(1.0)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return first


# --- Trawl ----------------------------------------------------------------------------------------------


def job_spec(rate: float, concurrency: int) -> Any:
    from trawl.api.scrapejob import ScrapeJobSpec

    return ScrapeJobSpec.model_validate(
        {
            "pool": "bench",
            "urls": ["http://127.1.0.1/"],  # replaced by the bench's own enqueue
            "extract": {"fields": [{"name": "h1", "selector": "h1"}], "title": False},
            "politeness": {
                "respectRobotsTxt": False,
                "requestsPerSecond": rate,
                "maxConcurrencyPerDomain": concurrency,
                "adaptiveDelay": False,
            },
        }
    )


def trawl_jobs(urls: list[str], polite: bool) -> list[tuple[Any, list[str]]]:
    """Polite: the fast and slow hosts' job (their limit) and the hard hosts' job (theirs); a cap run: one job
    with no limit that binds."""
    if not polite:
        return [(job_spec(10_000, 1000), urls)]
    fast, hard = KINDS["fast"], KINDS["hard"]
    return [
        (job_spec(fast.rate, fast.concurrency), [u for u in urls if not is_hard(u)]),
        (job_spec(hard.rate, hard.concurrency), [u for u in urls if is_hard(u)]),
    ]


async def run_trawl(
    urls: list[str], args: argparse.Namespace, port: int, tmp: Path, polite: bool, workers: int = 1
) -> dict[str, Any]:
    """One redis-server and ``workers`` ``trawl worker`` processes on it (one pool); stopped ``--seconds``
    (``--cap-seconds``) after the farm's first request. CPU is theirs and Redis's together."""
    import redis.asyncio as aioredis

    from trawl.dev import procs
    from trawl.dev.redis_server import RedisServer
    from trawl.jobspec.wire import build_job_config
    from trawl.queue import Queue

    seconds = args.seconds if polite else args.cap_seconds
    with RedisServer() as server:
        redis = aioredis.Redis.from_url(server.url)
        queue = Queue(redis, PREFIX)
        ids = []
        for spec, job_urls in trawl_jobs(urls, polite):
            ids.append(job_id := uuid.uuid4().hex[:12])
            await queue.register_job(build_job_config(job_id, spec, None))
            for i in range(0, len(job_urls), 5000):
                await queue.enqueue(job_id, job_urls[i : i + 5000])
            await queue.mark_enqueue_done(job_id)
        # This tree's code, not the one the venv has installed.
        paths = [str(REPO / "operator"), os.environ.get("PYTHONPATH", "")]
        send_log = polite and args.send_log
        started: list[tuple[Any, Path, Path]] = []  # (process, its log, its send log)
        metrics_ports = [free_port() for _ in range(workers)] if polite else []
        late: Counter[str] = Counter()
        outcomes: Counter[str] = Counter()
        try:
            for n in range(workers):
                argv = [
                    sys.executable, "-m", "trawl.cli", "worker", "--redis-url", server.url, "--prefix", PREFIX,
                    "--concurrency", str(args.concurrency), "--allowed-cidrs", "127.1.0.0/16",
                    "--worker-id", "bench" if workers == 1 else f"bench-{n}", "--log-level", "WARNING",
                ]  # fmt: skip
                if polite:  # its late sends are read before it stops
                    argv += ["--metrics-port", str(metrics_ports[n])]
                log_path, sends_path = tmp / f"trawl-worker-{n}.log", tmp / f"sends-{n}.json"
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
                if send_log:  # the worker's own send times (bench/sendlog)
                    sends_path.unlink(missing_ok=True)
                    env.update(
                        PYTHONPATH=os.pathsep.join([str(REPO / "bench" / "sendlog"), *paths]),
                        TRAWL_BENCH_SEND_LOG=str(sends_path),
                    )
                started.append((procs.start(argv, log_path=log_path, env=env), log_path, sends_path))
            pids = [p.pid for p, _, _ in started] + [server.proc.pid]  # type: ignore[union-attr]
            first = await first_request(port)
            cpu0 = [proc_cpu(pid) for pid in pids]
            while time.monotonic() < first + seconds + 0.5:
                for proc, log_path, _ in started:
                    if proc.poll() is not None:
                        raise SystemExit("trawl worker died:\n" + log_path.read_text()[-3000:])
                await asyncio.sleep(0.2)
            spent = [proc_cpu(pid) - before for pid, before in zip(pids, cpu0, strict=True)]
            cpu, worker_cpu = sum(spent), sum(spent[:-1])  # pids: the workers, then Redis
            memory = int((await redis.info("memory"))["used_memory"])
            for mport in metrics_ports:
                counters = await asyncio.to_thread(worker_counters, mport)
                late += counters["late_sends"]
                outcomes += counters["outcomes"]
            for job_id in ids:
                await queue.cancel(job_id)
        finally:
            for proc, _, _ in started:
                procs.stop(proc, timeout=30)
            await redis.aclose()
    sends = None
    if send_log:  # every worker's sends together: a host's limit is the pool's, not each worker's
        sends = [s for _, _, path in started if path.exists() for s in json.loads(path.read_text())]
    window = time.monotonic() - first
    cpu_share = cpu / window
    return {
        "worker_cpu_share": worker_cpu / window,  # the workers' alone (their sum; one process is at most 1)
        "first": first,
        "redis_memory": memory,
        "cpu_share": cpu_share,
        "sends": sends,
        "late_sends": dict(late),
        "outcomes": dict(outcomes),
    }


# --- main -----------------------------------------------------------------------------------------------


def cap_rate(bare: list[float], first: float, seconds: float) -> float:
    """A cap run's pages/s: arrivals in its window after the start-up share."""
    start, end = first + WARMUP * seconds, first + seconds
    return sum(1 for t in bare if start <= t < end) / (end - start)


def summary(log: dict[int, list[Arrival]], first: float, seconds: float, theory: float) -> dict[str, Any]:
    start, end = first + WARMUP * seconds, first + seconds
    achieved = window_rate(log, start, end)
    bad = violations(log)
    by_kind: Counter[str] = Counter()
    for h, entries in log.items():
        by_kind[kind_of(h)] += sum(1 for e in entries if start <= e.at < end)
    delays = handler_delays(log)
    return {
        "achieved": achieved,
        "efficiency": achieved / theory,
        "violations": len(bad),
        "violation_examples": [{**v.__dict__, "at": round(v.at - first, 3)} for v in bad[:5]],
        # The same check on the handler's clock (what the farm logged before kernel timestamps) and how late
        # the handler was after the kernel: the farm's own lateness, now out of the check.
        "violations_handler_clock": len(violations(handler_clock(log))),
        "handler_delay_p99": round(quantile(delays, 0.99), 4),
        "handler_delay_max": round(quantile(delays, 1.0), 4),
        "hosts_served": sum(1 for e in log.values() if e),
        "by_kind": {k: round(by_kind[k] / (end - start), 1) for k in KINDS},
    }


async def peer_cap(
    peer: str, hosts: int, args: argparse.Namespace, port: int, tmp: Path, workers: int = 1
) -> tuple[float, float]:
    """The peer's pages/s on this farm with no latency and no per-host limit, and (Trawl) the share of a core
    its worker and Redis used meanwhile (NaN for the others)."""
    cap_list = cap_urls(port, hosts, int(args.cap_seconds * 3000))
    await farm_log(port)  # cleared
    cpu = float("nan")
    if peer == "trawl":
        run = await run_trawl(cap_list, args, port, tmp, polite=False, workers=workers)
        first, cpu = run["first"], run["cpu_share"]
    else:
        first = await asyncio.to_thread(run_child, peer, cap_list, args, port, tmp, False)
    return cap_rate((await farm_log(port))[1], first, args.cap_seconds), cpu


async def run_peer(
    peer: str, hosts: int, args: argparse.Namespace, port: int, tmp: Path, workers: int = 1
) -> dict[str, Any]:
    """The peer's own cap on this farm, its polite run, its cap again: efficiency against min(limits, the
    larger cap) (the machine is shared: the larger of the two is the less disturbed). ``workers``: Trawl's
    worker processes, in the cap runs and the polite run alike."""
    cap, cap_cpu = await peer_cap(peer, hosts, args, port, tmp, workers)
    out: dict[str, Any] = {"cap": cap, "load": os.getloadavg()[0]}
    if peer == "trawl":
        out["workers"] = workers
    if peer == "bare":
        out["theoretical"] = theoretical(hosts, cap)
        return out
    urls = url_list(port, hosts, args.seconds, cap)
    if peer == "trawl":
        run = await run_trawl(urls, args, port, tmp, polite=True, workers=workers)
        first, out["redis_memory"], out["cpu_share"] = run["first"], run["redis_memory"], run["cpu_share"]
        out["worker_cpu_share"] = round(run["worker_cpu_share"], 3)  # near 1 per worker: it is CPU-bound
        out["late_sends"] = run["late_sends"]  # extra rate round trips of requests that left late (by outcome)
        out["outcomes"] = run["outcomes"]  # the workers' task outcomes over the whole run (released: given back)
        if run["sends"] is not None:  # the same check on the worker's own clock: what left it too close
            bad_sends = send_violations(run["sends"])
            out["send_violations"] = len(bad_sends)
            out["send_violation_examples"] = [{**v.__dict__, "at": round(v.at - first, 3)} for v in bad_sends[:5]]
    else:
        first = await asyncio.to_thread(run_child, peer, urls, args, port, tmp, True)
    polite_log, _, connections, unstamped = await farm_log(port)
    cap2, cap2_cpu = await peer_cap(peer, hosts, args, port, tmp, workers)
    out["caps"], out["load_after"] = [cap, cap2], os.getloadavg()[0]
    out["cap"] = cap = max(out["caps"])
    if peer == "trawl":  # CPU (worker + Redis) per page: the cap runs' against the polite run's
        caps_ms = [1000 * c / r for c, r in ((cap_cpu, out["caps"][0]), (cap2_cpu, cap2)) if r > 0]
        out["cap_cpu_ms_per_page"] = [round(x, 3) for x in caps_ms]
    out["theoretical"] = theoretical(hosts, cap)
    if args.logs:  # the fixture's request log of the run, for a closer look
        name = peer if workers == 1 else f"{peer}-{workers}w"
        sends = run["sends"] if peer == "trawl" else None  # the workers' own send times, under --send-log
        write_json(Path(args.logs) / f"{name}-{hosts}.json", {"first": first, "log": polite_log, "sends": sends})
    out.update(summary(polite_log, first, args.seconds, out["theoretical"]), urls=len(urls), unstamped=unstamped)
    pages = sum(len(e) for e in polite_log.values())
    out.update(connections=connections, pages=pages, pages_per_connection=round(pages / max(connections, 1), 2))
    if peer == "trawl" and out["achieved"] > 0:
        out["cpu_ms_per_page"] = round(1000 * out["cpu_share"] / out["achieved"], 3)
    return out


def trawl_key(workers: int) -> str:
    """A Trawl run's key in a size's results: ``trawl`` for one worker process, ``trawl_2w`` for two."""
    return "trawl" if workers == 1 else f"trawl_{workers}w"


async def one_size(hosts: int, args: argparse.Namespace, port: int, tmp: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"hosts": hosts, "limit_sum": limit_sum(hosts)}
    runs = [("bare", "bare", 1), *((trawl_key(n), "trawl", n) for n in args.workers), ("scrapy", "scrapy", 1)]
    for key, peer, workers in runs:
        if peer not in args.skip:
            result[key] = await run_peer(peer, hosts, args, port, tmp, workers)
            log(f"hosts={hosts} {key}: {json.dumps(result[key])}")
    return result


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def table(results: list[dict[str, Any]], workers: list[int]) -> None:
    """One row per size and Trawl worker count (Scrapy, one process, on each row of its size)."""
    print("| hosts | limits sum | bare loop cap | Trawl workers | Trawl cap | Trawl pages/s | Trawl eff. | Trawl viol. "
          "| Scrapy cap | Scrapy pages/s | Scrapy eff. | Scrapy viol. |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r, n in ((r, n) for r in results for n in workers):
        cells = [f"{r['hosts']:,}", f"{r['limit_sum']:.0f}", f"{r['bare']['cap']:.0f}" if "bare" in r else "-", str(n)]
        for peer in (trawl_key(n), "scrapy"):
            p = r.get(peer)
            cells += (
                [f"{p['cap']:.0f}", f"{p['achieved']:.1f}", f"{p['efficiency']:.2f}", str(p["violations"])]
                if p
                else ["-"] * 4
            )
        print("| " + " | ".join(cells) + " |")


async def controller(args: argparse.Namespace) -> int:
    from trawl.dev import procs

    sizes = args.hosts or ([10, 1000] if args.quick else [10, 100, 1000, 10000])
    with tempfile.TemporaryDirectory(prefix="trawl-hosts-") as tmp_s:
        tmp = Path(tmp_s)
        port_file = tmp / "farm.port"
        farm = procs.start([sys.executable, __file__, "--role", "farm", "--out", str(port_file)],
                           log_path=tmp / "farm.log")  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists():
                if farm.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the farm did not start:\n" + (tmp / "farm.log").read_text()[-2000:])
                await asyncio.sleep(0.05)
            port = int(port_file.read_text())
            results = [await one_size(h, args, port, tmp) for h in sizes]
        finally:
            procs.stop(farm, timeout=10)
    if args.json:
        write_json(Path(args.json), results)
    table(results, args.workers)
    last = results[-1]
    keys = [trawl_key(n) for n in args.workers]
    trawl_runs = [r[k] for r in results for k in keys if k in r]
    total = sum(t["violations"] for t in trawl_runs)
    at_send = [t["send_violations"] for t in trawl_runs if "send_violations" in t]
    # ``efficiency``: the first --workers count's (one process by default); the others beside it, by count.
    eff = [last.get(k, {}).get("efficiency", float("nan")) for k in keys]
    more = "".join(f" efficiency_{n}w={e:.2f}" for n, e in zip(args.workers[1:], eff[1:], strict=True))
    scrapy = last.get("scrapy", {}).get("efficiency", float("nan"))
    print(f"hosts={last['hosts']} efficiency={eff[0]:.2f}{more} scrapy_efficiency={scrapy:.2f} violations={total}"
          + (f" send_violations={sum(at_send)}" if at_send else "")
          + (f" workers={','.join(map(str, args.workers))}" if args.workers != [1] else ""))  # fmt: skip
    return 0 if total == 0 else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", choices=("controller", "farm", "bare", "scrapy"), default="controller")
    p.add_argument("--hosts", type=int, action="append", help="a size (repeatable); default 10 100 1000 10000")
    p.add_argument("--quick", action="store_true", help="10 and 1,000 hosts, 20 s windows, 8 s caps")
    p.add_argument("--seconds", type=float, default=0.0, help="each polite run's window (default 30, --quick 20)")
    p.add_argument("--cap-seconds", type=float, default=0.0, help="each cap run's window (default 10, --quick 8)")
    p.add_argument("--concurrency", type=int, default=256, help="requests at once, every crawler (per Trawl worker)")
    p.add_argument("--workers", type=int, action="append",
                   help="Trawl worker processes on the pool (repeatable: each count is run; default 1)")  # fmt: skip
    p.add_argument("--skip", action="append", default=[], choices=("bare", "trawl", "scrapy"))
    p.add_argument("--json", help="write every figure there")
    p.add_argument("--logs", help="write each polite run's request log (and Trawl's send log) to this directory")
    p.add_argument("--send-log", action="store_true",
                   help="also check Trawl's own send times (bench/sendlog): send_violations in the JSON")  # fmt: skip
    p.add_argument("--out", type=Path)
    p.add_argument("--urls", type=Path)
    p.add_argument("--cap", action="store_true", help="(child) the cap run: no per-host limit")
    args = p.parse_args()
    args.seconds = args.seconds or (20.0 if args.quick else 30.0)
    args.cap_seconds = args.cap_seconds or (8.0 if args.quick else 10.0)
    args.workers = args.workers or [1]
    if args.role == "farm":
        farm_main(args.out)
    elif args.role == "bare":
        bare_main(args.urls, args.concurrency)
    elif args.role == "scrapy":
        scrapy_main(args.urls, args.concurrency, polite=not args.cap)
    else:
        return asyncio.run(controller(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
