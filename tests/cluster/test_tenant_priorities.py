"""Issue 33, as the tenant (ScrapeJob rights only, tenancy.py): what the platform's spec.tenancy on a pool
lets a job author do, against a real API server and the operator with its own RBAC.

- A job naming a priority class above its tenant's ceiling, and a job of a tenant the pool does not list
  (no defaultTenant), are Stalled with the reason and the figure, one Warning Event each, nothing of them
  in Redis.
- A job within its ceiling is registered with its tenant and the class's value; the pool writes its tenant
  table to Redis and lists the tenant's use on its status.
- A tenant a quota holds back shows it: the pool's status.tenants says which quota and the figure, and a
  job of that tenant with tasks ready and none claimed reads Reconciling=True, reason QuotaExceeded (kstatus:
  InProgress, it proceeds on its own), not Stalled. The hold is written as the queue's claim writes it
  (the fields of trawl.queue.tenants): the fairness and the quotas themselves are the queue's tests.
- A tenant whose URLs-queued quota is full: a job's seeds stop at the room left, a job with none in shows
  QuotaExceeded with the figure, and when the platform raises the quota every seed goes in, once.
- With tenancy.tenantLabel, the label the platform put on the Namespace names the tenant (the tenant
  cannot set it); a namespace without it is refused.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import redis
from operator_fixtures import apply, condition, events_for, get, job, pool

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from waits import wait_for

CLASSES = [
    {"name": "high", "value": 8},
    {"name": "normal", "value": 5, "globalDefault": True},
    {"name": "bulk", "value": 1},
]


def _tenancy(tenant: str) -> dict[str, Any]:
    return {
        "priorityClasses": CLASSES,
        "tenants": [
            {"name": tenant, "weight": 3, "priorityCeiling": "normal", "quotas": {"inFlight": 2, "pagesPerDay": 1000}},
            {"name": "someone-else", "weight": 1},
        ],
    }


def _stalled(cp: ControlPlane, namespace: str, name: str, reason: str) -> Any:
    cond = condition(get(cp, "scrapejob", name, namespace), "Stalled") or {}
    return cond.get("status") == "True" and cond.get("reason") == reason and cond


def test_a_tenant_cannot_rise_above_its_ceiling_nor_run_where_it_is_not_admitted(
    control_plane: ControlPlane, namespace: str, operator: Any, tenant: Any, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    url = ["http://127.0.0.1:9/a"]
    try:
        closed = {"priorityClasses": CLASSES, "tenants": [{"name": "someone-else"}]}
        apply(
            control_plane,
            pool("shared", redis_server.url, tenancy=_tenancy(namespace)),
            pool("closed", redis_server.url, tenancy=closed),
            namespace=namespace,
        )
        tenant.apply(
            job("vip", "shared", url, priorityClassName="high"),
            job("loud", "shared", url, priority=9),
            job("outsider", "closed", url),
            job("batch", "shared", url, priorityClassName="bulk"),
        )
        vip = wait_for("vip refused", lambda: _stalled(control_plane, namespace, "vip", "PriorityAboveCeiling"))
        assert vip["message"] == (
            f"spec.priorityClassName 'high' (8) is above what the pool grants tenant {namespace!r}: its "
            "priorityCeiling 'normal' (5); ask for at most that, or have the platform raise the tenant's ceiling"
        )
        loud = wait_for("loud refused", lambda: _stalled(control_plane, namespace, "loud", "PriorityAboveCeiling"))
        assert loud["message"].startswith("spec.priority 9 is above what the pool grants tenant")
        outsider = wait_for(
            "outsider refused", lambda: _stalled(control_plane, namespace, "outsider", "TenantNotAdmitted")
        )
        assert outsider["message"].startswith(f"tenant {namespace!r} (the job's namespace) is not admitted")
        assert "lists tenants someone-else and has no defaultTenant" in outsider["message"]

        # Within its ceiling: registered with its tenant and the class's value.
        keys = Keys(f"trawl:{{{namespace}/shared}}")
        uid = get(control_plane, "scrapejob", "batch", namespace)["metadata"]["uid"]
        registered = wait_for("batch registered", lambda: client.hgetall(keys.job(uid)) or None, diag=operator.log_tail)
        assert (registered["prio"], registered["tn"]) == ("1", namespace)
        # ... and its status says so (what the class resolved to is the author's to see).
        batch_status = wait_for(
            "batch's status",
            lambda: (
                (get(control_plane, "scrapejob", "batch", namespace).get("status") or {}).get("priority") == 1
                and get(control_plane, "scrapejob", "batch", namespace)["status"]
            ),
        )
        assert batch_status["tenant"] == namespace
        # The pool's tenant table, as the claim script reads it, and the tenant's use on the pool's status.
        table = wait_for("the tenant table", lambda: client.hgetall(keys.tenant_config) or None)
        assert table[namespace] == "3|2||1000||" and table["someone-else"] == "1|||||"

        def listed() -> Any:
            rows = (get(control_plane, "scrapepool", "shared", namespace).get("status") or {}).get("tenants") or []
            return next((r for r in rows if r["tenant"] == namespace), None)

        row = wait_for("the tenant on the pool's status", listed, diag=operator.log_tail)
        assert row.pop("queued") in (0, 1)  # batch's one URL, once the pool's poll has seen it
        assert row == {
            "tenant": namespace,
            "weight": 3,
            "inFlight": 0,
            "claimedTotal": 0,
            "pagesToday": 0,
            "browserSecondsToday": 0,
        }

        for name, reason in (("vip", "PriorityAboveCeiling"), ("loud", "PriorityAboveCeiling"),
                             ("outsider", "TenantNotAdmitted")):  # fmt: skip
            obj = get(control_plane, "scrapejob", name, namespace)
            assert not client.exists(Keys(f"trawl:{{{namespace}/{obj['spec']['pool']}}}").job(obj["metadata"]["uid"]))
            reasons = Counter(e["reason"] for e in events_for(control_plane, namespace, name))
            assert reasons[reason] == 1, (name, reasons)  # told once, not at every pass

        # The queue holds the tenant back (as claim.lua records it): the pool and the job say so.
        client.hset(
            keys.tenant(namespace), mapping={"hold": "inFlight", "hm": "2/2 in flight", "hs": repr(time.time())}
        )

        def held() -> Any:
            cond = condition(get(control_plane, "scrapejob", "batch", namespace), "Reconciling") or {}
            return cond.get("reason") == "QuotaExceeded" and cond

        cond = wait_for("batch shows QuotaExceeded", held, 60, diag=operator.log_tail)
        assert cond["status"] == "True" and "(2/2 in flight)" in cond["message"]
        batch = get(control_plane, "scrapejob", "batch", namespace)
        assert condition(batch, "Stalled")["status"] == "False"  # type: ignore[index]
        assert batch["status"]["phase"] == "Queued"
        row = listed()
        assert (row["throttled"], row["throttledMessage"]) == ("inFlight", "2/2 in flight") and row["throttledSince"]

        # The platform removes the pool's tenancy: its quotas are lifted in the queue and the list goes.
        control_plane.kubectl(
            "patch", "scrapepool", "shared", "-n", namespace, "--type=json",
            "-p", '[{"op": "remove", "path": "/spec/tenancy"}]',
        )  # fmt: skip
        wait_for(
            "the tenants off the pool's status",
            lambda: "tenants" not in (get(control_plane, "scrapepool", "shared", namespace).get("status") or {}),
            diag=operator.log_tail,
        )
        assert client.hgetall(keys.tenant_config) == {"*": "1|||||", "aging": "300.0"}
        assert operator.running
    finally:
        for key in client.scan_iter(match=f"trawl:{{{namespace}/*", count=1000):
            client.unlink(key)
        client.close()


def test_the_platforms_namespace_label_names_the_tenant(
    control_plane: ControlPlane, namespace: str, operator: Any, tenant: Any, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    url = ["http://127.0.0.1:9/a"]
    assert not tenant.can("patch", "namespaces") and not tenant.can("update", "namespaces")
    control_plane.kubectl("label", "namespace", namespace, "example.com/team=team-a")
    try:
        labelled = {
            "tenantLabel": "example.com/team",
            "priorityClasses": CLASSES,
            "tenants": [{"name": "team-a", "weight": 2, "priorityCeiling": "bulk"}],
            "defaultTenant": {"weight": 1},
        }
        other_label = {**labelled, "tenantLabel": "example.com/cost-center"}
        apply(
            control_plane,
            pool("teams", redis_server.url, tenancy=labelled),
            pool("costs", redis_server.url, tenancy=other_label),
            namespace=namespace,
        )
        tenant.apply(job("mine", "teams", url), job("unlabelled", "costs", url))
        keys = Keys(f"trawl:{{{namespace}/teams}}")
        uid = get(control_plane, "scrapejob", "mine", namespace)["metadata"]["uid"]
        registered = wait_for("mine registered", lambda: client.hgetall(keys.job(uid)) or None, diag=operator.log_tail)
        # team-a's terms (the default class, 5, lowered to its ceiling, bulk), not the default tenant's.
        assert (registered["tn"], registered["prio"]) == ("team-a", "1")
        cond = wait_for(
            "unlabelled refused", lambda: _stalled(control_plane, namespace, "unlabelled", "TenantNotAdmitted")
        )
        assert cond["message"] == (
            f"namespace {namespace!r} has no label example.com/cost-center, which names the tenant on this pool: "
            "ask the platform to label the namespace"
        )
    finally:
        for key in client.scan_iter(match=f"trawl:{{{namespace}/*", count=1000):
            client.unlink(key)
        client.close()


def test_a_full_tenant_queue_holds_seeds_back_until_there_is_room(
    control_plane: ControlPlane, namespace: str, operator: Any, tenant: Any, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    narrow = {"tenants": [{"name": namespace, "quotas": {"urlsQueued": 3}}]}
    try:
        apply(control_plane, pool("narrow", redis_server.url, tenancy=narrow), namespace=namespace)
        tenant.apply(job("first", "narrow", [f"http://127.0.0.1:9/f{i}" for i in range(5)]))
        keys = Keys(f"trawl:{{{namespace}/narrow}}")
        first_uid = get(control_plane, "scrapejob", "first", namespace)["metadata"]["uid"]
        wait_for("first's 3 seeds in", lambda: client.hget(keys.job(first_uid), "pen") == "3", diag=operator.log_tail)
        tenant.apply(job("second", "narrow", [f"http://127.0.0.1:9/s{i}" for i in range(4)]))

        def held() -> Any:
            cond = condition(get(control_plane, "scrapejob", "second", namespace), "Reconciling") or {}
            return cond.get("reason") == "QuotaExceeded" and cond

        cond = wait_for("second shows QuotaExceeded", held, 60, diag=operator.log_tail)
        assert cond["status"] == "True" and "(3/3 URLs queued): its seeds wait" in cond["message"]
        rows = wait_for(
            "the full queue on the pool's status",
            lambda: [
                r
                for r in (get(control_plane, "scrapepool", "narrow", namespace).get("status") or {}).get("tenants", [])
                if r.get("queueFullMessage")
            ],
        )
        assert rows[0]["queued"] == 3 and rows[0]["queueFullMessage"] == "3/3 URLs queued"
        assert client.hget(keys.job(first_uid), "cur") == "3"  # the rest waits in first's seed stream

        # The platform makes room: every seed of both jobs goes in, once.
        wider = {"spec": {"tenancy": {"tenants": [{"name": namespace, "quotas": {"urlsQueued": 100}}]}}}
        control_plane.kubectl("patch", "scrapepool", "narrow", "-n", namespace, "--type=merge", "-p", json.dumps(wider))
        second_uid = get(control_plane, "scrapejob", "second", namespace)["metadata"]["uid"]
        wait_for(
            "all seeds in",
            lambda: client.hget(keys.job(first_uid), "pen") == "5" and client.hget(keys.job(second_uid), "pen") == "4",
            60,
            diag=operator.log_tail,
        )
        assert client.hget(keys.job(first_uid), "tot") == "5" and client.hget(keys.job(second_uid), "tot") == "4"
        wait_for("second no longer held", lambda: not held(), 60)
    finally:
        for key in client.scan_iter(match=f"trawl:{{{namespace}/*", count=1000):
            client.unlink(key)
        client.close()
