"""Issue 32, as the tenant (a job author's rights only): a pool's credential header never reaches a server the
job author names, only the origin the pool author listed for it (defaults.request.headerOrigins)."""

from __future__ import annotations

import json
from typing import Any

import redis
from operator_fixtures import apply, exists, get, job, pool, wait_complete

from trawl.dev.bookstore import Bookstore
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from waits import wait_for

POOL_KEY = "pool-partner-key"


def _echoed(redis_url: str, namespace: str, pool_name: str, uid: str) -> dict[str, dict[str, str]]:
    """The request headers each echo page of the job reported, by URL (its record's text is their JSON)."""
    client = redis.Redis.from_url(redis_url)
    try:
        entries = client.xrange(Keys(f"trawl:{{{namespace}/{pool_name}}}").results(uid))
    finally:
        client.close()
    records = [json.loads(fields[b"data"]) for _id, fields in entries]
    return {r["url"]: json.loads(r["text"]) for r in records}


def test_a_tenants_job_never_receives_the_pools_credential(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    tenant: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    with Bookstore(host="127.0.0.1", categories=1, books_per_category=1) as partner:
        # The pool author's: an API key for a partner site, and a harmless default.
        headers = {"X-Api-Key": POOL_KEY, "Accept-Language": "de"}
        request = {"headers": headers, "headerOrigins": [partner.url]}
        apply(control_plane, pool("shared", redis_server.url, defaults={"request": request}), namespace=namespace)
        wait_for("Deployment", lambda: exists(control_plane, "deployment", "shared-workers", namespace))
        # The tenant's: a job on a server of its own (the bookstore's echo page: what reached it)...
        own = bookstore.url + "/hostile/headers"
        tenant.apply(job("mine", "shared", [own], extract={"text": True}))
        # ... and one on the partner's site, which is what the pool's key is for.
        theirs = partner.url + "/hostile/headers"
        tenant.apply(job("partner", "shared", [theirs], extract={"text": True}))
        for name in ("mine", "partner"):
            wait_complete(control_plane, name, namespace, 120, operator.log_tail)
    mine, on_partner = (get(control_plane, "scrapejob", n, namespace)["metadata"]["uid"] for n in ("mine", "partner"))
    to_tenant = _echoed(redis_server.url, namespace, "shared", mine)[own]
    assert "X-Api-Key" not in to_tenant, to_tenant  # the pool's credential stayed with the pool
    assert to_tenant["Accept-Language"] == "de"  # a harmless default still applies
    assert _echoed(redis_server.url, namespace, "shared", on_partner)[theirs]["X-Api-Key"] == POOL_KEY
