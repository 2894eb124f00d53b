#!/usr/bin/env python3
"""Redis memory and CPU per record of the sinks' exactly-once record (``J:res:keys``), before and after.

Writes ``--records`` records of one job through each record, 100 a batch as the worker's finisher does
(``fresh`` then ``mark``: what the JSON Lines, webhook, Files and S3 sinks do per batch), on a fresh
redis-server, interleaved and repeated ``--rounds`` times:

* ``set``    -- the set of 32-character hex record keys (Trawl before the digest hash; inlined here);
* ``digest`` -- :class:`trawl.sinks.base.Deduped`: 16-byte digests in 2-byte buckets of one hash.

Per implementation and size: bytes per record (``INFO memory`` ``used_memory`` delta, and ``MEMORY USAGE
... SAMPLES 0`` of the keys), redis-server CPU per record (``INFO cpu`` delta, the cost every pool's Redis
pays), this process's CPU per record (the client side: digests, encoding, the redis-py round trips; the
records themselves are made outside the timed part), and the 1-minute load average before each run.

    .venv/bin/python bench/sink_dedupe.py [--records 100000 1000000] [--rounds 2] [--kinds set digest]

Prints one JSON object per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from trawl.redisconn.client import atomic_pipeline
from trawl.sinks.base import DEDUPE_TTL_SECONDS, Deduped, Record, record_key

KEYS = Keys("trawl:{bench/dedupe}")
BATCH = 100


class SetDeduped:
    """The set of hex keys, as Trawl kept it before the digest hash (SMISMEMBER, then SADD + EXPIRE)."""

    def __init__(self, redis: aioredis.Redis, dedupe_key: Any) -> None:
        self.redis = redis
        self.dedupe_key = dedupe_key

    async def fresh(self, job_id: str, records: Sequence[Record]) -> list[Record]:
        unique: dict[str, Record] = {}
        for rec in records:
            unique.setdefault(rec.key, rec)
        keys = list(unique)
        seen = await self.redis.smismember(self.dedupe_key(job_id), keys)  # type: ignore[misc]
        return [unique[k] for k, s in zip(keys, seen, strict=True) if not s]

    async def mark(self, job_id: str, records: Sequence[Record]) -> None:
        if not records:
            return
        key = self.dedupe_key(job_id)
        async with atomic_pipeline(self.redis) as pipe:
            pipe.sadd(key, *[r.key for r in records])
            pipe.expire(key, DEDUPE_TTL_SECONDS)
            await pipe.execute()


def records(job: str, start: int, stop: int) -> list[Record]:
    out = []
    for i in range(start, stop):
        url = f"https://books.example.com/catalogue/category-{i % 50:02d}/item-{i:08d}.html"
        out.append(Record(job, url, {"key": record_key(job, url)}))
    return out


async def server_cpu(r: aioredis.Redis) -> float:
    info = await r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def used(r: aioredis.Redis) -> int:
    return int((await r.info("memory"))["used_memory"])


async def run(url: str, kind: str, n: int) -> dict[str, Any]:
    r = aioredis.Redis.from_url(url)
    await r.flushall()
    dd = SetDeduped(r, KEYS.results_written) if kind == "set" else Deduped(r, KEYS.results_written)
    await dd.mark("warm", records("warm", 0, BATCH))  # scripts loaded, connection made
    await r.flushall()
    load = os.getloadavg()[0]
    mem0, srv0, cpu, wall = await used(r), await server_cpu(r), 0.0, 0.0
    for i in range(0, n, BATCH):
        batch = records("j", i, min(n, i + BATCH))  # made outside the timed part, not all held at once
        cpu0, wall0 = time.process_time(), time.perf_counter()
        fresh = await dd.fresh("j", batch)
        await dd.mark("j", fresh)
        cpu, wall = cpu + time.process_time() - cpu0, wall + time.perf_counter() - wall0
    srv = await server_cpu(r) - srv0
    mem = await used(r) - mem0
    usage = 0
    for key in await r.keys("*"):
        usage += int(await r.memory_usage(key, samples=0) or 0)
    again = await dd.fresh("j", records("j", 0, 1000) + records("j", n - 1000, n))  # all known as written
    await r.aclose()
    assert again == [], "a written record was taken for fresh"
    return {
        "kind": kind,
        "records": n,
        "load1": round(load, 2),
        "used_memory_bytes_per_record": round(mem / n, 1),
        "memory_usage_bytes_per_record": round(usage / n, 1),
        "redis_cpu_us_per_record": round(srv / n * 1e6, 2),
        "client_cpu_us_per_record": round(cpu / n * 1e6, 2),
        "wall_us_per_record": round(wall / n * 1e6, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kinds", nargs="+", choices=("set", "digest"), default=["set", "digest"])
    args = ap.parse_args()
    with RedisServer() as server:
        for n in args.records:
            for rnd in range(args.rounds):
                for kind in args.kinds if rnd % 2 == 0 else args.kinds[::-1]:
                    print(json.dumps(asyncio.run(run(server.url, kind, n))), flush=True)


if __name__ == "__main__":
    main()
