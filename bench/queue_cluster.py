#!/usr/bin/env python3
"""One pool over 1, 2 and 3 shards (``spec.redis.shards``) on a local Redis Cluster: tasks/s, and per
master the tasks it served and its Redis CPU per task; optionally the cost of ``WAIT`` durability.

A fresh cluster of ``--masters`` masters (``--replicas`` replicas each) on loopback ports. Per shard
count, a list job of ``--tasks`` no-op tasks is enqueued, then ``--procs`` processes each run
``--concurrency`` claim/ack loops (claims of ``--batch``, one ``ack_many`` per claim) until the job is
done. Reported per run:

* tasks/s       -- completions per second over the drain;
* per master    -- tasks served (the shard's job counters) and Redis CPU (INFO cpu user+sys delta) per
                   task served there, in microseconds;
* with ``--wait`` (needs replicas) a second row per shard count where every ack is followed by
  ``WAIT 1 1000`` on the shard's master: the ack is on a replica before the worker goes on.

On a 2-core machine the cluster's masters and the client share the cores, so tasks/s cannot grow with
shards; what the run shows is the load spread over the masters and the per-task cost staying flat.

    .venv/bin/python bench/queue_cluster.py                 # 3 masters, 20,000 tasks, shards 1 2 3
    .venv/bin/python bench/queue_cluster.py --replicas 1 --wait
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from typing import Any

from redis.crc import key_slot

from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.queue import JobConfig
from trawl.queue.keys import pool_prefix
from trawl.queue.sharded import ShardedQueue
from trawl.redisconn.client import connect


def cpu_of(cluster: LocalRedisCluster, port: int) -> float:
    info = cluster.command(port, "INFO", "cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _work(
    url: str, prefix: str, shards: int, concurrency: int, batch: int, wait: bool, wid: str
) -> tuple[int, float, float]:
    redis = connect(url, cluster=True)
    q = ShardedQueue(redis, prefix, shards=shards, lease_seconds=60)
    done = 0
    first, last = float("inf"), 0.0

    async def loop(n: int) -> None:
        nonlocal done, first, last
        worker = f"{wid}-{n}"
        idle = 0
        while idle < 3:
            tasks = await q.claim(worker, batch)
            if not tasks:
                idle += 1
                await asyncio.sleep(0.05)
                continue
            idle = 0
            first = min(first, time.time())
            await q.ack_many(tasks, worker)
            if wait:
                # durability: the acks are on a replica before the worker goes on (one WAIT per shard touched)
                for shard in {int(t.task_id.rsplit(".", 1)[1]) for t in tasks}:
                    node = redis.get_node_from_key(q.shards[shard].keys.stats)  # type: ignore[attr-defined]
                    await redis.execute_command("WAIT", 1, 1000, target_nodes=node)
            done += len(tasks)
            last = time.time()

    await asyncio.gather(*(loop(n) for n in range(concurrency)))
    await redis.aclose()
    return done, first, last


def _proc(args: tuple[str, str, int, int, int, bool, str]) -> tuple[int, float, float]:
    return asyncio.run(_work(*args))


async def _prepare(url: str, prefix: str, shards: int, tasks: int) -> ShardedQueue:
    redis = connect(url, cluster=True)
    q = ShardedQueue(redis, prefix, shards=shards)
    await q.register_job(JobConfig("bench"))
    await q.enqueue("bench", [f"https://site-{i % 97}.example/item/{i}" for i in range(tasks)], start_index=0)
    await q.mark_enqueue_done("bench")
    return q


async def _per_shard(url: str, prefix: str, shards: int) -> list[int]:
    redis = connect(url, cluster=True)
    q = ShardedQueue(redis, prefix, shards=shards)
    out = [(await s.job_stats("bench")).succeeded for s in q.shards]
    await redis.aclose()
    return out


def run(cluster: LocalRedisCluster, shards: int, args: argparse.Namespace, wait: bool, label: str) -> dict[str, Any]:
    prefix = pool_prefix("bench", label)
    q = asyncio.run(_prepare(cluster.url, prefix, shards, args.tasks))
    masters = [n.port for n in cluster.nodes() if n.master and n.slots]
    shard_master = [cluster.master_for_slot(key_slot(s.prefix.encode())).port for s in q.shards]
    # each master's idle CPU (cluster bus, cron) per second, subtracted from the run's
    idle0, t0 = {p: cpu_of(cluster, p) for p in masters}, time.monotonic()
    time.sleep(2.0)
    idle_rate = {p: (cpu_of(cluster, p) - idle0[p]) / (time.monotonic() - t0) for p in masters}
    cpu0, started = {p: cpu_of(cluster, p) for p in masters}, time.monotonic()
    jobs = [(cluster.url, prefix, shards, args.concurrency, args.batch, wait, f"p{i}") for i in range(args.procs)]
    with multiprocessing.get_context("spawn").Pool(args.procs) as pool:
        results = pool.map(_proc, jobs)
    cpu1, wall = {p: cpu_of(cluster, p) for p in masters}, time.monotonic() - started
    done = sum(r[0] for r in results)
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    served = asyncio.run(_per_shard(cluster.url, prefix, shards))
    assert done == args.tasks == sum(served), (done, served)
    per_master: dict[int, dict[str, float]] = {}
    for port in masters:
        tasks_here = sum(n for n, m in zip(served, shard_master, strict=True) if m == port)
        cpu = max(0.0, cpu1[port] - cpu0[port] - idle_rate[port] * wall)
        per_master[port] = {
            "tasks": tasks_here,
            "cpu_s": round(cpu, 3),
            "us_per_task": round(cpu * 1e6 / tasks_here, 1) if tasks_here else 0.0,
        }
    return {
        "shards": shards,
        "wait": wait,
        "tasks_per_s": round(done / elapsed),
        "masters_used": len(set(shard_master)),
        "per_master": per_master,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--masters", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=0)
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--wait", action="store_true", help="also measure WAIT 1 after every ack (needs --replicas 1)")
    args = ap.parse_args()
    with LocalRedisCluster(masters=args.masters, replicas_per_master=args.replicas) as cluster:
        for shards in args.shards:
            print(json.dumps(run(cluster, shards, args, False, f"s{shards}")), flush=True)
            if args.wait:
                print(json.dumps(run(cluster, shards, args, True, f"s{shards}w")), flush=True)


if __name__ == "__main__":
    main()
