"""Per-domain rules through the operator's own job pass (reconcile_job) on a real redis-server: a job rule
looser than its pool's rule is refused, Stalled with the rule named, and nothing of it is enqueued; an
acceptable one is registered and its status shows the rules as they apply, kept on later passes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from trawl.dev.redis_server import RedisServer
from trawl.operator.connections import RedisConnections
from trawl.operator.job.reconcile import reconcile_job

NAMESPACE, POOL = "rules", "pool"


async def passes(redis_url: str, job_rule: dict[str, Any], uid: str, n: int) -> dict[str, Any]:
    """``n`` passes of a job whose politeness has ``job_rule``, each from the status the last one wrote."""
    pool = {
        "redis": {"url": redis_url},
        "defaults": {"politeness": {"domains": [{"host": "*.example.com", "requestsPerSecond": 1}]}},
    }
    spec = {"pool": POOL, "urls": ["https://shop.example.com/a"], "politeness": {"domains": [job_rule]}}
    index = {(NAMESPACE, POOL): [{"spec": pool, "uid": "pool-uid"}]}
    connections, status = RedisConnections(), {}
    for _ in range(n):
        outcome = await reconcile_job(
            name=uid,
            namespace=NAMESPACE,
            uid=uid,
            generation=1,
            spec_raw=spec,
            status=status,
            annotations={},
            pool_index=index,
            connections=connections,
            now=datetime.now(UTC),
        )
        status = outcome.status
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


async def test_a_job_rule_looser_than_the_pools_is_stalled_and_a_stricter_one_shows_in_the_status(
    redis_server: RedisServer,
) -> None:
    looser = await passes(redis_server.url, {"host": "shop.example.com", "requestsPerSecond": 5}, "uid-loose", 1)
    stalled = condition(looser, "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "LimitExceeded")
    assert "spec.politeness.domains[0] (shop.example.com): requestsPerSecond 5 is looser than" in stalled["message"]
    assert "politeness" not in looser and not looser.get("enqueued")

    stricter = await passes(redis_server.url, {"host": "shop.example.com", "delaySeconds": 4}, "uid-strict", 2)
    assert condition(stricter, "Stalled")["status"] == "False"
    assert stricter["politeness"]["domains"] == [
        {"host": "*.example.com", "requestsPerSecond": 1.0, "maxConcurrencyPerDomain": 4, "poolRule": "*.example.com"},
        {
            "host": "shop.example.com",
            "requestsPerSecond": 0.25,
            "maxConcurrencyPerDomain": 4,
            "poolRule": "*.example.com",
            "jobRule": "shop.example.com",
        },
    ]
