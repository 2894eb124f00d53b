"""The operator, its workers and the CLI on a Sentinel-mode ScrapePool (`redis.mode: Sentinel`): the worker
Deployment carries the Sentinels and the master's name, the master SIGKILLed mid-job is replaced by its
replica, the operator and the workers follow, the job completes with exact counts and `trawl results`
lists every URL once; a pool naming a master the Sentinels do not know is not Ready, with their answer."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import redis.asyncio as aioredis
from operator_fixtures import apply, condition, get, job, pool, wait_complete
from rsentinel_helpers import MASTER_NAME
from typer.testing import CliRunner

from trawl.cli import app
from trawl.dev.bookstore import PRODUCT_FIELDS, Bookstore
from trawl.dev.procs import free_port
from trawl.dev.redis_sentinel import LocalRedisSentinel
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


def sentinel_pool(name: str, deployment: LocalRedisSentinel, master_name: str) -> dict[str, Any]:
    spec = pool(name, "unused")
    spec["spec"]["redis"] = {
        "mode": "Sentinel",
        "sentinels": deployment.sentinel_addresses,
        "masterName": master_name,
    }
    return spec


async def test_sentinel_pool_job_completes_over_a_master_failover(
    redis_sentinel: LocalRedisSentinel,
    sentinel_client: aioredis.Redis,
    control_plane: Any,
    namespace: str,
    operator: Any,
    supervisor: Any,
) -> None:
    cp = control_plane
    master = redis_sentinel.master_port()
    spec = sentinel_pool("shop", redis_sentinel, MASTER_NAME)
    spec["spec"]["worker"]["metricsPort"] = free_port()
    spec["spec"]["autoscaling"].update({"minReplicas": 2, "maxReplicas": 2})
    spec["spec"]["queue"] = {"leaseSeconds": 6}
    with Bookstore(host="127.0.0.2", latency=0.1) as site:
        # The second half answers 5 s late, so the job is still running when the master dies.
        urls = [site.product_url(i) + ("?delay=5" if i > 40 else "") for i in range(1, 81)]
        apply(
            cp,
            spec,
            sentinel_pool("astray", redis_sentinel, "nosuchmaster"),
            job(
                "books",
                "shop",
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
        redis_sentinel.kill(master)
        try:
            promoted = await asyncio.to_thread(redis_sentinel.wait_promoted, master, 60)
            wait_complete(cp, "books", namespace, 180, lambda: diag(operator, supervisor))
            fetched = Counter(e.path for e in site.entries() if e.path != "/robots.txt")
        finally:
            redis_sentinel.restart(master)
    assert promoted != master
    # the workers got the Sentinels, not a URL, from the Deployment the operator rendered
    dep = get(cp, "deployment", "shop-workers", namespace)
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TRAWL_REDIS_SENTINELS"] == ",".join(redis_sentinel.sentinel_addresses)
    assert env["TRAWL_REDIS_SENTINEL_MASTER"] == MASTER_NAME and "TRAWL_REDIS_URL" not in env
    obj = get(cp, "scrapejob", "books", namespace)
    status = obj["status"]
    assert status["phase"] == "Succeeded", json.dumps(status)[:2000]
    assert status["counts"]["succeeded"] == 80 and status["counts"].get("dead", 0) == 0
    assert condition(obj, "DataLost") is None or condition(obj, "DataLost")["status"] == "False"
    assert status["results"]["count"] == 80
    # the user's CLI finds the master through the Sentinels too: every URL once
    res = await asyncio.to_thread(cli, cp, namespace, "results", "books")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["url"] for r in lines) == sorted(urls)
    duplicates = sum(fetched.values()) - len(urls)
    print(f"operator Sentinel failover: {duplicates} duplicate fetches over {len(urls)} URLs")
    assert len(fetched) == 80 and duplicates >= 0
    # the pool whose master name the Sentinels do not know: not Ready, with what they answered
    astray = get(cp, "scrapepool", "astray", namespace)
    ready = condition(astray, "Ready") or {}
    assert ready.get("status") == "False" and ready.get("reason") == "RedisUnavailable", ready
    assert "master 'nosuchmaster' of Sentinels" in ready["message"], ready
    assert f"monitors no master named 'nosuchmaster' (it knows '{MASTER_NAME}')" in ready["message"], ready
    await asyncio.to_thread(redis_sentinel.wait_healthy, 60)
