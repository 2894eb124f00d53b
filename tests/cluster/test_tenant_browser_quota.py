"""Issue 33's browserSecondsPerDay, as the tenant (ScrapeJob rights only, tenancy.py), against a real API
server, the operator with its own RBAC and a real redis-server.

The browser time is written as the workers write it (the real Queue's add_browser_seconds; the measuring
itself is tests/browser/test_browser_time.py): once the tenant's day is over its quota, the pool's status
says how much, the tenant's rendering job reads Reconciling=True, reason QuotaExceeded, with the figure, and
is suspended in the queue (its spec untouched), while the tenant's plain job is not; when the platform
raises the quota the job is resumed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis
import redis.asyncio as aioredis
from operator_fixtures import apply, condition, get, job, pool

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.queue import Queue
from trawl.queue.keys import Keys
from waits import wait_for

URLS = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]


def _tenancy(namespace: str, seconds: float) -> dict[str, Any]:
    return {"tenants": [{"name": namespace, "quotas": {"browserSecondsPerDay": seconds}}]}


async def _add_browser_seconds(url: str, prefix: str, seconds: dict[str, float]) -> int:
    client = aioredis.Redis.from_url(url)
    try:
        return await Queue(client, prefix).add_browser_seconds(seconds)
    finally:
        await client.aclose()


def test_a_tenant_over_its_browser_time_has_its_rendering_jobs_held_until_the_quota_is_raised(
    control_plane: ControlPlane, namespace: str, operator: Any, tenant: Any, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    prefix = f"trawl:{{{namespace}/browsy}}"
    keys = Keys(prefix)
    try:
        spec = pool("browsy", redis_server.url, tenancy=_tenancy(namespace, 60))
        spec["spec"]["worker"]["browser"] = {}
        apply(control_plane, spec, namespace=namespace)
        tenant.apply(
            job("render", "browsy", URLS, render={"mode": "Browser"}),
            job("plain", "browsy", [u + "?plain" for u in URLS]),
        )
        uid = {n: get(control_plane, "scrapejob", n, namespace)["metadata"]["uid"] for n in ("render", "plain")}
        wait_for(
            "both jobs queued",
            lambda: all(client.hget(keys.job(u), "tot") == "2" for u in uid.values()),
            60,
            diag=operator.log_tail,
        )
        assert client.hget(keys.job(uid["render"]), "sus") != "1"

        # The tenant's workers held browser pages for 61.5 s today (over 60): the day's sum in Redis.
        counted = asyncio.run(_add_browser_seconds(redis_server.url, prefix, {uid["render"]: 41.5, uid["plain"]: 20}))
        assert counted == 2

        def held() -> Any:
            cond = condition(get(control_plane, "scrapejob", "render", namespace), "Reconciling") or {}
            return cond.get("reason") == "QuotaExceeded" and cond

        cond = wait_for("render shows QuotaExceeded", held, 60, diag=operator.log_tail)
        assert cond["status"] == "True"
        assert cond["message"] == (
            "its tenant is over a quota of its pool (browserSecondsPerDay: 62/60 s today): its browser tasks wait "
            "until 00:00 UTC"
        )
        wait_for("render suspended in the queue", lambda: client.hget(keys.job(uid["render"]), "sus") == "1", 30)
        rendered = get(control_plane, "scrapejob", "render", namespace)
        assert not rendered["spec"].get("suspend")  # the user's field is never touched
        assert rendered["status"]["phase"] == "Queued"
        stalled = condition(rendered, "Stalled") or {}
        assert stalled.get("status") != "True"
        [row] = get(control_plane, "scrapepool", "browsy", namespace)["status"]["tenants"]
        assert row["tenant"] == namespace and row["browserSecondsToday"] == 61.5
        # The tenant's plain job runs on.
        assert client.hget(keys.job(uid["plain"]), "sus") != "1"
        plain = condition(get(control_plane, "scrapejob", "plain", namespace), "Reconciling") or {}
        assert plain.get("reason") != "QuotaExceeded"

        # The platform raises the quota: the job is resumed, without anyone touching it.
        wider = {"spec": {"tenancy": _tenancy(namespace, 120)}}
        control_plane.kubectl("patch", "scrapepool", "browsy", "-n", namespace, "--type=merge", "-p", json.dumps(wider))
        wait_for(
            "render resumed in the queue",
            lambda: client.hget(keys.job(uid["render"]), "sus") != "1",
            60,
            diag=operator.log_tail,
        )
        wait_for("render no longer held", lambda: not held(), 60)
    finally:
        for key in client.scan_iter(match=f"trawl:{{{namespace}/*", count=1000):
            client.unlink(key)
        client.close()
