#!/usr/bin/env python3
"""Worker start-up: from ``exec`` of a ``trawl worker`` process to its first claim and its first request.

What every scale-up from zero and every short job pays before any work is done. Each run starts a fresh
worker process against a real ``redis-server`` that already holds a registered job with its seed (as
when the autoscaler adds a pod for pending work), and a static site served by nginx. Two instants are
taken from outside the process, so the worker under test needs no instrumentation (the same command
measures old and new code):

- **first claim**: the timestamp Redis's ``MONITOR`` gives the first call of the claim script;
- **first page**: the timestamp nginx logs (``$msec``) for the first request it received;

both minus the wall-clock time just before ``Popen`` (one clock: everything runs on this machine). The
worker is stopped once the job (a few pages) is finished; its CPU time (with its children's) up to then,
start-up and those few pages, is printed too: it moves less with the machine's load than wall times do.
Both trees are byte-compiled first, as the image is (``compileall``). The worker is started as the image starts
it: the ``trawl`` console script (``trawl.entry:main``, written here as pip writes it), so ``trawl worker``
with plain options, which never imports typer nor ``trawl.cli`` (a tree without ``trawl/entry.py`` runs
``python -m trawl.cli worker``, the same modules but runpy). Printed: each run, then the median and the
spread; ``--importtime`` adds the import profile of that path (top entries, and self time by package).

    .venv/bin/python bench/worker_startup.py            # 7 runs
    .venv/bin/python bench/worker_startup.py --runs 15 --importtime
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_throughput import FIELDS, PRODUCT_RE, Nginx, build_site, compile_bytecode, tree_cpu

PREFIX = "trawl:{bench/startup}"


async def _monitor_first_claim(url: str, sha: str, seen: asyncio.Event, out: list[float]) -> None:
    """Read MONITOR until the claim script is called; its timestamp goes to ``out``."""
    reader, writer = await asyncio.open_connection(*url.removeprefix("redis://").split("/")[0].split(":"))
    writer.write(b"MONITOR\r\n")
    await writer.drain()
    await reader.readline()  # +OK
    seen.set()
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            if sha.encode() in line and b'"EVALSHA"' in line.upper():
                out.append(float(line[1:].split(b" ", 1)[0]))
                return
    finally:
        writer.close()


async def one_run(
    redis_url: str, base: str, access_log: Path, tmp: Path, sha: str, pythonpath: str | None = None
) -> dict[str, float]:
    import redis.asyncio as aioredis

    from trawl.api.scrapejob import ScrapeJobSpec
    from trawl.dev import procs
    from trawl.jobspec.wire import build_job_config
    from trawl.queue import Queue

    redis = aioredis.Redis.from_url(redis_url)
    queue = Queue(redis, PREFIX)
    job_id = uuid.uuid4().hex[:12]
    spec = ScrapeJobSpec.model_validate(
        {
            "pool": "startup",
            "urls": [base + "/"],
            "crawl": {"maxDepth": 1, "maxPages": 5},
            "extract": {"fields": [{"name": n, "selector": s} for n, s in FIELDS.items()], "onlyMatching": PRODUCT_RE},
            "politeness": {"respectRobotsTxt": False, "adaptiveDelay": False, "requestsPerSecond": 1000},
        }
    )
    await queue.register_job(build_job_config(job_id, spec, None))
    await queue.enqueue(job_id, [base + "/"])
    await queue.mark_enqueue_done(job_id)
    claim_at: list[float] = []
    ready = asyncio.Event()
    monitor = asyncio.create_task(_monitor_first_claim(redis_url, sha, ready, claim_at))
    await ready.wait()
    log_size = access_log.stat().st_size if access_log.exists() else 0  # noqa: ASYNC240 (before the clock)
    argv = [
        *worker_command(tmp, pythonpath), "worker", "--redis-url", redis_url, "--prefix", PREFIX,
        "--allowed-cidrs", "127.0.0.1/32", "--worker-id", "startup", "--log-level", "WARNING",
    ]  # fmt: skip
    t0 = time.time()
    env = dict(os.environ) | ({"PYTHONPATH": pythonpath} if pythonpath else {})
    worker = procs.start(argv, log_path=tmp / "startup-worker.log", env=env)
    try:
        deadline = time.monotonic() + 60
        while not (await queue.job_stats(job_id)).finished:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("worker failed:\n" + (tmp / "startup-worker.log").read_text()[-3000:])
            await asyncio.sleep(0.02)
        cpu = tree_cpu(worker.pid)  # start-up and the job's few pages: the worker and its children
    finally:
        procs.stop(worker, timeout=20)
        monitor.cancel()
        await asyncio.gather(monitor, return_exceptions=True)
        await redis.aclose()
    with access_log.open("rb") as f:
        f.seek(log_size)
        first_request = float(f.readline().split()[0])
    if not claim_at:
        raise SystemExit("MONITOR saw no claim")
    return {"claim": claim_at[0] - t0, "page": first_request - t0, "cpu": cpu}


CONSOLE_SCRIPT = """import re
import sys
from trawl.entry import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def worker_command(tmp: Path, pythonpath: str | None) -> list[str]:
    """How the image starts a worker: its ``trawl`` console script (``[project.scripts]``, as pip writes
    it), run by this interpreter; ``python -m trawl.cli`` for a tree from before ``trawl.entry``."""
    import trawl

    root = Path(pythonpath) / "trawl" if pythonpath else Path(trawl.__file__).parent
    if not (root / "entry.py").exists():
        return [sys.executable, "-m", "trawl.cli"]
    script = tmp / "bin" / "trawl"
    if not script.exists():
        script.parent.mkdir(exist_ok=True)
        script.write_text(CONSOLE_SCRIPT)
    return [sys.executable, str(script)]


# What trawl.entry.main does for `trawl worker <plain options>` before it calls the worker's main().
WORKER_IMPORTS = (
    "import sys; sys.argv = ['trawl', 'worker']; import trawl.entry; from trawl.boot.worker import prepare; "
    "prepare(); import trawl.worker.cliargs, trawl.worker.main; assert 'typer' not in sys.modules"
)


def importtime(top: int) -> None:
    """The modules that cost most to import on a worker's path to its first claim (one run, under
    ``-X importtime``, which itself adds about a quarter): cumulative per module, then self time summed
    by top-level package (``trawl.<subpackage>`` for this project)."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", WORKER_IMPORTS], capture_output=True, text=True, check=True
    ).stderr
    rows = []
    by_package: dict[str, int] = {}
    for line in err.splitlines()[1:]:
        self_us, cumulative_us, module = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative_us), module.rstrip()))
        parts = module.strip().split(".")
        package = ".".join(parts[:2]) if parts[0] == "trawl" else parts[0]
        by_package[package] = by_package.get(package, 0) + int(self_us)
    total = sum(c for c, n in rows if not n.startswith(" " * 2))
    print(f"imports of trawl worker (trawl.entry's path): {total / 1000:.0f} ms (top-level modules, one run)")
    for cumulative, name in sorted(rows, reverse=True)[:top]:
        print(f"  {cumulative / 1000:7.1f} ms {name}")
    print("self time by package:")
    for package, self_us in sorted(by_package.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {self_us / 1000:7.1f} ms {package}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--importtime", action="store_true", help="Also print the import profile.")
    parser.add_argument(
        "--compare",
        metavar="DIR",
        help="Alternate each run with one of the code under DIR (PYTHONPATH, e.g. an older commit's operator/ "
        "from git archive): both measured under the same load.",
    )
    args = parser.parse_args()

    from trawl.dev.redis_server import RedisServer
    from trawl.queue.client import load_script_source

    def claim_sha(root: str | None) -> str:
        """The SHA1 the worker under ``root`` (None: this tree) calls its claim script by: that tree's own
        ``load_script_source`` builds the script, as its worker does."""
        if root is None:
            return hashlib.sha1(load_script_source("claim").encode()).hexdigest()
        code = "import hashlib; from trawl.queue.client import load_script_source as s; "
        code += "print(hashlib.sha1(s('claim').encode()).hexdigest())"
        env = dict(os.environ) | {"PYTHONPATH": root}
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    compile_bytecode()  # as the image does: a worker starts from __pycache__
    if args.compare:
        compile_bytecode(args.compare)
    tmp = Path(tempfile.mkdtemp(prefix="trawl-startup-"))
    variants = {"current": None} | ({"compare": args.compare} if args.compare else {})
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    shas = {name: claim_sha(pythonpath) for name, pythonpath in variants.items()}
    try:
        build_site(tmp / "site", 40)
        nginx = Nginx(tmp / "site", tmp, access_log=True).start()
        try:
            with RedisServer() as redis_server:
                for i in range(args.runs):
                    for name, pythonpath in variants.items():
                        base = f"http://127.0.0.1:{nginx.port}"
                        sha = shas[name]
                        r = asyncio.run(one_run(redis_server.url, base, nginx.access_log, tmp, sha, pythonpath))
                        results[name].append(r)
                        claim_ms, page_ms = r["claim"] * 1000, r["page"] * 1000
                        print(
                            f"  run {i + 1} {name}: first claim {claim_ms:.0f} ms, first page {page_ms:.0f} ms, "
                            f"CPU {r['cpu'] * 1000:.0f} ms, load {os.getloadavg()[0]:.2f}",
                            flush=True,
                        )
        finally:
            nginx.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    for name, runs in results.items():
        claims = [r["claim"] * 1000 for r in runs]
        pages = [r["page"] * 1000 for r in runs]
        cpus = [r["cpu"] * 1000 for r in runs]
        label = name if name == "current" else f"{name} ({args.compare})"
        print(
            f"{label}: exec -> first claim median {statistics.median(claims):.0f} ms (min {min(claims):.0f}, "
            f"max {max(claims):.0f}); exec -> first page median {statistics.median(pages):.0f} ms "
            f"(min {min(pages):.0f}, max {max(pages):.0f}); worker CPU median {statistics.median(cpus):.0f} ms "
            f"(min {min(cpus):.0f})"
        )
    if args.importtime:
        importtime(25)


if __name__ == "__main__":
    main()
