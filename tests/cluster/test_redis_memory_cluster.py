"""The pool's Redis full or evicting, through the operator: what `kubectl get` shows, and that nothing is lost.

- Full (maxmemory reached, noeviction, as the chart's bundled Redis runs): the pool and the job that
  cannot be enqueued say RedisOutOfMemory with Redis's figures and the remedy, one Warning Event each,
  and the operator's gauges show the pool's Redis over its maxmemory; once Redis has room the job
  completes with exactly one record per URL. Deleting a job, the remedy, works while Redis is full.
- An evicting maxmemory-policy: the pool is Degraded (RedisEvictionPolicy, one Warning Event) until the
  policy is noeviction again.

The fill lowers ``maxmemory`` under what the test's redis-server holds; the test restores it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import redis
from metrics_page import Scrape
from operator_fixtures import apply, condition, events_for, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from waits import wait_for

URLS = 30


def _cond(cp: ControlPlane, kind: str, name: str, ns: str, type_: str) -> dict[str, Any] | None:
    return condition(get(cp, kind, name, ns), type_)


def test_a_full_redis_is_on_the_pool_and_the_job_then_the_job_completes_exactly_once(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        apply(control_plane, pool("mem", redis_server.url), namespace=namespace)
        wait_for(
            "the pool to be Ready",
            lambda: (_cond(control_plane, "scrapepool", "mem", namespace, "Ready") or {}).get("status") == "True",
            diag=operator.log_tail,
        )
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", str(used // 2))  # full: Redis refuses every write that may grow it
        urls = [bookstore.product_url(i) for i in range(1, URLS + 1)]
        apply(control_plane, job("mem-job", "mem", urls), namespace=namespace)

        def full(kind: str, name: str) -> dict[str, Any] | None:
            stalled = _cond(control_plane, kind, name, namespace, "Stalled") or {}
            return stalled if stalled.get("reason") == "RedisOutOfMemory" and stalled["status"] == "True" else None

        job_stalled = wait_for(
            "the job's RedisOutOfMemory", lambda: full("scrapejob", "mem-job"), diag=operator.log_tail
        )
        pool_stalled = wait_for(
            "the pool's RedisOutOfMemory", lambda: full("scrapepool", "mem"), diag=operator.log_tail
        )
        for stalled in (job_stalled, pool_stalled):
            assert "used of maxmemory" in stalled["message"] and "raise maxmemory" in stalled["message"]
        assert (_cond(control_plane, "scrapepool", "mem", namespace, "Ready") or {}).get("status") == "False"
        # What the alert reads: the pool's Redis over its maxmemory, from the operator's /metrics.
        page = Scrape(operator.metrics_text())
        labels = {"namespace": namespace, "pool": "mem"}
        limit = page.value("trawl_pool_redis_memory_max_bytes", **labels)
        assert limit == used // 2 and page.value("trawl_pool_redis_memory_used_bytes", **labels) > limit
        for name in ("mem-job", "mem"):
            reasons = Counter(e["reason"] for e in events_for(control_plane, namespace, name))
            assert reasons["RedisOutOfMemory"] == 1, reasons  # told once, not at every pass

        client.config_set("maxmemory", "0")  # room again: nothing to re-apply
        wait_complete(control_plane, "mem-job", namespace, 180, operator.log_tail)
    finally:
        client.config_set("maxmemory", "0")
    obj = get(control_plane, "scrapejob", "mem-job", namespace)
    assert obj["status"]["counts"]["succeeded"] == URLS and obj["status"]["counts"]["deadLettered"] == 0
    entries = client.xrange(Keys(f"trawl:{{{namespace}/mem}}").results(obj["metadata"]["uid"]))
    assert sorted(f[b"url"].decode() for _id, f in entries) == sorted(urls)  # each URL exactly once
    wait_for(
        "the pool Ready again",
        lambda: (_cond(control_plane, "scrapepool", "mem", namespace, "Ready") or {}).get("status") == "True",
        diag=operator.log_tail,
    )

    # The remedy works while Redis is full: deleting the finished job removes its keys (its results too).
    keys = Keys(f"trawl:{{{namespace}/mem}}")
    uid = obj["metadata"]["uid"]
    assert client.exists(*keys.job_keys(uid)) > 0
    try:
        client.config_set("maxmemory", str(int(client.info("memory")["used_memory"]) // 2))
        control_plane.kubectl("delete", "scrapejob/mem-job", "-n", namespace, "--timeout=60s")
        assert client.exists(*keys.job_keys(uid)) == 0
    finally:
        client.config_set("maxmemory", "0")

    # An evicting policy: Degraded, told once, lifted when the policy is noeviction again.
    try:
        client.config_set("maxmemory", str(1 << 30))
        client.config_set("maxmemory-policy", "allkeys-lru")

        def degraded(reason: str, status: str) -> dict[str, Any] | None:
            cond = _cond(control_plane, "scrapepool", "mem", namespace, "Degraded") or {}
            return cond if (cond.get("reason") == reason or reason == "*") and cond.get("status") == status else None

        cond = wait_for("Degraded RedisEvictionPolicy", lambda: degraded("RedisEvictionPolicy", "True"))
        assert "allkeys-lru" in cond["message"] and "noeviction" in cond["message"]
        reasons = Counter(e["reason"] for e in events_for(control_plane, namespace, "mem"))
        assert reasons["RedisEvictionPolicy"] == 1, reasons
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "0")
    wait_for("Degraded lifted", lambda: degraded("*", "False"), diag=operator.log_tail)
    client.close()
