#!/usr/bin/env python3
"""Parser processes' start: a worker's first page too large to parse inline, from the request to the reply.

A worker parses a page of more than ``parse_inline_max_tags`` tags (2,048) in one of its parser processes
(:mod:`trawl.worker.parsepool`), which start on that first page: each is a spawned interpreter that
imports what unpickling its target needs. Each run, in a fresh interpreter, sends one such page to a new
pool of two processes and prints the time to its reply and the CPU of the two children (their start, their
imports and that page). ``--compare DIR`` alternates each run with the code under DIR (PYTHONPATH, e.g.
an older commit's ``operator/`` from ``git archive``), both byte-compiled first as the image is.

    .venv/bin/python bench/parser_startup.py --runs 7 --compare /tmp/before/operator
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


async def _first_page() -> tuple[float, float]:
    import time

    from trawl.worker.extract import ExtractOptions, Extractor
    from trawl.worker.parsepool import ParsePool

    body = ("<html><body>" + "<p>x</p>" * 3000 + "</body></html>").encode()  # 3,002 tags: not inline
    pool = ParsePool(processes=2)
    start = time.perf_counter()
    await pool.extract(Extractor(ExtractOptions()), body, "http://example.test/")
    wall = time.perf_counter() - start
    await pool.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, children.ru_utime + children.ru_stime


def one_run(pythonpath: str | None) -> tuple[float, float]:
    env = dict(os.environ) | ({"PYTHONPATH": pythonpath} if pythonpath else {})
    out = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--compare", metavar="DIR", help="Alternate each run with the code under DIR.")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        wall, cpu = asyncio.run(_first_page())
        print(wall, cpu)
        return

    from crawl_throughput import compile_bytecode

    compile_bytecode()
    if args.compare:
        compile_bytecode(args.compare)
    variants = {"current": None} | ({"compare": args.compare} if args.compare else {})
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for i in range(args.runs):
        for name, pythonpath in variants.items():
            wall, cpu = one_run(pythonpath)
            results[name].append((wall, cpu))
            print(
                f"  run {i + 1} {name}: first page's reply {wall * 1000:.0f} ms, children's CPU {cpu * 1000:.0f} ms, "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    for name, runs in results.items():
        walls = [w * 1000 for w, _ in runs]
        cpus = [c * 1000 for _, c in runs]
        label = name if name == "current" else f"{name} ({args.compare})"
        print(
            f"{label}: first page's reply median {statistics.median(walls):.0f} ms (min {min(walls):.0f}); "
            f"children's CPU median {statistics.median(cpus):.0f} ms (min {min(cpus):.0f})"
        )


if __name__ == "__main__":
    main()
