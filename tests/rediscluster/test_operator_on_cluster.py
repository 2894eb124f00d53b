"""The operator, its workers and the CLI on a cluster-mode ScrapePool (`redis.mode: Cluster`) spread over
the three masters (`redis.shards: 3`), with the pool's home master SIGKILLed mid-job: the replica takes
over, the operator and workers reconnect, the job completes with exact counts, `trawl results` lists
every URL once, and no data loss is claimed (the pool's data epoch was replicated)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import redis.asyncio as aioredis
from operator_fixtures import apply, condition, get, job, pool, wait_complete
from rcluster_helpers import pool_on_master
from redis.crc import key_slot
from typer.testing import CliRunner

from trawl.api.naming import queue_prefix
from trawl.cli import app
from trawl.dev.bookstore import PRODUCT_FIELDS, Bookstore
from trawl.dev.procs import free_port
from trawl.dev.redis_cluster import LocalRedisCluster
from trawl.queue.sharded import ShardedQueue
from waits import wait_for


def cli(cp: Any, namespace: str, *args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--kubeconfig", str(cp.kubeconfig_path), "-n", namespace])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"trawl {' '.join(args)} raised {result.exception!r}\n{result.output}")
    return result


def diag(operator: Any, supervisor: Any) -> str:
    logs = sorted(supervisor.log_dir.glob("*.log"))
    tails = [f"--- {p.name}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs[-3:]]
    return f"--- operator:\n{operator.log_tail(40)}\n" + "\n".join(tails)


async def test_cluster_pool_job_completes_over_a_master_failover(
    redis_cluster: LocalRedisCluster,
    cluster_client: aioredis.Redis,
    control_plane: Any,
    namespace: str,
    operator: Any,
    supervisor: Any,
) -> None:
    cp = control_plane
    master = next(n for n in redis_cluster.nodes() if n.master and n.slots)
    name = pool_on_master(redis_cluster, master.port, namespace, base="shop")
    prefix = queue_prefix(namespace, name)
    slot = key_slot(prefix.encode())
    spec = pool(name, redis_cluster.url)
    spec["spec"]["redis"].update({"mode": "Cluster", "shards": 3})  # the pool's tasks on all three masters
    spec["spec"]["worker"]["metricsPort"] = free_port()
    spec["spec"]["autoscaling"].update({"minReplicas": 2, "maxReplicas": 2})
    spec["spec"]["queue"] = {"leaseSeconds": 6}
    with Bookstore(host="127.0.0.2", latency=0.1) as site:
        # The second half answers 5 s late, so the job is still running when the master dies (a fast
        # job under load could finish between two status reads).
        urls = [site.product_url(i) + ("?delay=5" if i > 40 else "") for i in range(1, 81)]
        apply(
            cp,
            spec,
            job(
                "books",
                name,
                urls,
                extract={"fields": PRODUCT_FIELDS},
                politeness={"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8},
            ),
            namespace=namespace,
        )

        def done_count() -> int:
            status = get(cp, "scrapejob", "books", namespace).get("status") or {}
            return int((status.get("counts") or {}).get("succeeded") or 0)

        wait_for("a quarter of the job done", lambda: done_count() >= 20, 120, diag=lambda: diag(operator, supervisor))
        assert done_count() < 80
        redis_cluster.kill(master.port)
        try:
            promoted = await asyncio.to_thread(redis_cluster.wait_promoted, slot, master.port, 60)
            wait_complete(cp, "books", namespace, 180, lambda: diag(operator, supervisor))
            fetched = Counter(e.path for e in site.entries() if e.path != "/robots.txt")
        finally:
            redis_cluster.restart(master.port)
    assert promoted.port != master.port
    obj = get(cp, "scrapejob", "books", namespace)
    status = obj["status"]
    assert status["phase"] == "Succeeded", json.dumps(status)[:2000]
    assert status["counts"]["succeeded"] == 80 and status["counts"].get("dead", 0) == 0
    assert condition(obj, "DataLost") is None or condition(obj, "DataLost")["status"] == "False"
    assert status["results"]["count"] == 80
    # the user's CLI reads the cluster too: every URL once
    res = await asyncio.to_thread(cli, cp, namespace, "results", "books")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["url"] for r in lines) == sorted(urls)
    res = await asyncio.to_thread(cli, cp, namespace, "status", "books")
    assert res.exit_code == 0 and "Complete" in res.output, res.output
    duplicates = sum(fetched.values()) - len(urls)
    print(f"operator failover: {duplicates} duplicate fetches over {len(urls)} URLs")
    assert len(fetched) == 80 and duplicates >= 0
    shards = ShardedQueue(cluster_client, prefix, shards=3)
    per_shard = [(await s.job_stats(obj["metadata"]["uid"])).succeeded for s in shards.shards]
    assert sum(per_shard) == 80 and min(per_shard) > 0, per_shard
    await asyncio.to_thread(redis_cluster.wait_healthy, 60)


async def test_a_cluster_pool_whose_master_and_replica_lost_the_data_says_data_lost(
    redis_cluster: LocalRedisCluster,
    cluster_client: aioredis.Redis,
    control_plane: Any,
    namespace: str,
    operator: Any,
    supervisor: Any,
) -> None:
    """What a failover cannot save (the master's data gone from its replica too: here a FLUSHALL on the
    pool's master, which the replica copies): the data epoch read through the cluster client changes, the
    job and the pool say DataLost, the job's URLs are enqueued again and it ends with one record each."""
    cp = control_plane
    master = next(n for n in redis_cluster.nodes() if n.master and n.slots)
    name = pool_on_master(redis_cluster, master.port, namespace, base="lossy")
    spec = pool(name, redis_cluster.url)
    spec["spec"]["redis"]["mode"] = "Cluster"
    spec["spec"]["worker"]["metricsPort"] = free_port()
    spec["spec"]["autoscaling"].update({"minReplicas": 1, "maxReplicas": 1})
    with Bookstore(host="127.0.0.2", latency=0.2) as site:
        urls = [site.product_url(i) for i in range(1, 41)]
        apply(
            cp,
            spec,
            job("books", name, urls, extract={"fields": PRODUCT_FIELDS}, politeness={"maxConcurrencyPerDomain": 4}),
            namespace=namespace,
        )

        def succeeded() -> int:
            status = get(cp, "scrapejob", "books", namespace).get("status") or {}
            return int((status.get("counts") or {}).get("succeeded") or 0)

        wait_for("some progress", lambda: succeeded() >= 5, 120, diag=lambda: diag(operator, supervisor))
        redis_cluster.command(master.port, "FLUSHALL")

        def lost(kind: str, obj_name: str) -> bool:
            return (condition(get(cp, kind, obj_name, namespace), "DataLost") or {}).get("status") == "True"

        wait_for(
            "DataLost on the job and the pool",
            lambda: lost("scrapejob", "books") and lost("scrapepool", name),
            60,
            diag=lambda: diag(operator, supervisor),
        )
        wait_complete(cp, "books", namespace, 180, lambda: diag(operator, supervisor))
    res = await asyncio.to_thread(cli, cp, namespace, "results", "books")
    assert res.exit_code == 0, res.output
    got = Counter(json.loads(line)["url"] for line in res.stdout.splitlines() if line.startswith("{"))
    assert set(got) == set(urls) and set(got.values()) == {1}
