"""End to end through the operator: kubectl apply → Deployment → workers → kubectl wait → results."""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from operator_fixtures import apply, condition, events_for, exists, get, job, pool, wait_complete

from trawl.dev.bookstore import PRODUCT_FIELDS, PRODUCT_XPATH_FIELD
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from waits import wait_for


def _phase(cp: ControlPlane, name: str, ns: str) -> str | None:
    return (get(cp, "scrapejob", name, ns).get("status") or {}).get("phase")


def _diag(operator: Any, supervisor: Any) -> str:
    logs = sorted(supervisor.log_dir.glob("*.log"))
    tails = [f"--- {p.name}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs[-3:]]
    return f"--- operator:\n{operator.log_tail(30)}\n" + "\n".join(tails)


def _results(redis_url: str, namespace: str, pool_name: str, uid: str) -> dict[str, dict[str, Any]]:
    client = redis.Redis.from_url(redis_url)
    try:
        entries = client.xrange(Keys(f"trawl:{{{namespace}/{pool_name}}}").results(uid))
    finally:
        client.close()
    out: dict[str, dict[str, Any]] = {}
    for _id, fields in entries:
        url = fields[b"url"].decode()
        assert url not in out, f"duplicate result for {url}"
        out[url] = json.loads(fields[b"data"])
    return out


def test_crawl_completes_and_results_match_the_site(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    apply(control_plane, pool("shop", redis_server.url), namespace=namespace)
    wait_for("Deployment", lambda: exists(control_plane, "deployment", "shop-workers", namespace))
    spec = {
        "crawl": {"maxDepth": 6, "maxPages": 1000, "exclude": ["/private/"]},
        "extract": {"fields": [*PRODUCT_FIELDS, PRODUCT_XPATH_FIELD], "onlyMatching": "/product/"},
        "politeness": {"requestsPerSecond": 500, "maxConcurrencyPerDomain": 16},
    }
    apply(control_plane, job("shop-crawl", "shop", [bookstore.url + "/"], **spec), namespace=namespace)
    wait_complete(control_plane, "shop-crawl", namespace, 180, lambda: _diag(operator, supervisor))
    obj = get(control_plane, "scrapejob", "shop-crawl", namespace)
    status = obj["status"]
    expected = bookstore.expected()
    pages = 1 + sum(bookstore.catalog.pages(c) for c in bookstore.catalog.categories) + len(expected)
    assert status["phase"] == "Succeeded"
    assert status["counts"]["succeeded"] == pages
    assert status["counts"]["deadLettered"] == 0
    assert status["progress"] == 100
    assert condition(obj, "Ready")["status"] == "True"  # type: ignore[index]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    results = _results(redis_server.url, namespace, "shop", obj["metadata"]["uid"])
    assert set(results) == set(expected)
    for url, record in results.items():
        assert {k: record[k] for k in expected[url]} == expected[url]
    reasons = {e["reason"] for e in events_for(control_plane, namespace, "shop-crawl")}
    assert {"Accepted", "Enqueued", "Completed"} <= reasons


def test_dead_letters_then_retry_annotation_completes(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    # This test is about the retry policy and dead letters, so the pool turns its per-domain circuit breaker
    # off: with it on, the site's run of 503s would hold the tasks back instead of spending their attempts
    # (tests/integration/test_worker_breaker.py covers the breaker).
    flaky_worker = {"concurrency": 16, "drainSeconds": 10, "allowedCidrs": ["127.0.0.0/8"]}
    flaky_worker["circuitBreaker"] = {"failureThreshold": 0}
    apply(control_plane, pool("flaky", redis_server.url, worker=flaky_worker), namespace=namespace)
    # Each URL answers 503 three times, then recovers: two attempts are not enough.
    urls = [f"{bookstore.url}/hostile/503?id={namespace}-{i}&fail=3" for i in range(5)]
    urls.append(bookstore.url + "/product/1.html")
    retry = {"maxAttempts": 2, "initialDelaySeconds": 0.2, "maxDelaySeconds": 0.5, "honorRetryAfter": False}
    apply(control_plane, job("flaky-job", "flaky", urls, retry=retry), namespace=namespace)

    def dead() -> Any:
        obj = get(control_plane, "scrapejob", "flaky-job", namespace)
        cond = condition(obj, "DeadLettered")
        return cond and cond["status"] == "True" and obj["status"]["phase"] == "Failed" and obj

    obj = wait_for("DeadLettered", dead, timeout=120, diag=operator.log_tail)
    status = obj["status"]
    assert status["counts"]["deadLettered"] == 5
    assert status["counts"]["succeeded"] == 1
    assert {d["url"] for d in status["deadLetters"]} == set(urls[:5])
    assert all(d["attempts"] == 2 and d["errorClass"] == "HTTP5xx" for d in status["deadLetters"])
    assert condition(obj, "Failed")["status"] == "True"  # type: ignore[index]
    assert "DeadLettered" in {e["reason"] for e in events_for(control_plane, namespace, "flaky-job")}

    # The site has "recovered" for the third hit; ask for the dead letters to be retried.
    control_plane.kubectl("annotate", "scrapejob/flaky-job", "-n", namespace, "trawl.dev/retry-dead-letters=1")
    wait_complete(control_plane, "flaky-job", namespace, 120, lambda: _diag(operator, supervisor))
    obj = get(control_plane, "scrapejob", "flaky-job", namespace)
    assert obj["status"]["counts"]["succeeded"] == 6
    assert obj["status"]["counts"]["deadLettered"] == 0
    assert obj["status"]["retryDeadLettersHandled"] == "1"
    assert condition(obj, "DeadLettered")["status"] == "False"  # type: ignore[index]


def test_delete_cancels_and_suspend_resume_completes(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    apply(control_plane, pool("p", redis_server.url), namespace=namespace)
    slow = {"politeness": {"requestsPerSecond": 2, "maxConcurrencyPerDomain": 1}}
    many = [bookstore.product_url(i) for i in range(1, 101)]
    apply(control_plane, job("doomed", "p", many, **slow), namespace=namespace)
    wait_for(
        "doomed running",
        lambda: _phase(control_plane, "doomed", namespace) == "Running",
        timeout=90,
        diag=operator.log_tail,
    )
    uid = get(control_plane, "scrapejob", "doomed", namespace)["metadata"]["uid"]
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys(f"trawl:{{{namespace}/p}}")
    assert client.exists(keys.job(uid))
    control_plane.kubectl("delete", "scrapejob/doomed", "-n", namespace, "--timeout=60s")
    job_keys = [*keys.job_keys(uid), keys.results(uid) + ":keys", keys.results_digests(uid)]
    assert client.exists(*job_keys) == 0, [k for k in job_keys if client.exists(k)]
    fetched_after_delete = len(bookstore.entries())
    time.sleep(3)
    # In-flight requests may finish; nothing new of the cancelled job is fetched.
    assert len(bookstore.entries()) - fetched_after_delete <= 2

    # Suspend a job before it runs, then resume it: it completes with exact counts.
    urls = [bookstore.product_url(i) for i in range(1, 21)]
    apply(control_plane, job("pausable", "p", urls, suspend=True), namespace=namespace)
    wait_for("Suspended", lambda: _phase(control_plane, "pausable", namespace) == "Suspended", diag=operator.log_tail)
    time.sleep(2)
    obj = get(control_plane, "scrapejob", "pausable", namespace)
    assert obj["status"]["counts"]["succeeded"] == 0
    assert condition(obj, "Suspended")["status"] == "True"  # type: ignore[index]
    control_plane.kubectl(
        "patch", "scrapejob/pausable", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
    wait_complete(control_plane, "pausable", namespace, 120, lambda: _diag(operator, supervisor))
    counts = get(control_plane, "scrapejob", "pausable", namespace)["status"]["counts"]
    assert counts == {"total": 20, "pending": 0, "inFlight": 0, "succeeded": 20, "retrying": 0, "deadLettered": 0}
    client.close()
