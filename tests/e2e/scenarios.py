"""Scenario steps on a cluster where the chart is installed: jobs, waits, results, pod facts.

Shared by the real-node suite (tests/e2e) and usable by any cluster with the chart installed (the kind
run applies the same site, values and job)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from e2e_node import RealNode, condition, pod_ready, wait_for

from trawl.dev.bookstore import PRODUCT_FIELDS, PRODUCT_XPATH_FIELD, catalog, expected_record

NAMESPACE = "trawl-system"
SITE = "http://bookstore.trawl-e2e-site.svc.cluster.local:8080"
SLOW_SITE = "http://bookstore-slow.trawl-e2e-site.svc.cluster.local:8080"
FIELDS = [*PRODUCT_FIELDS, PRODUCT_XPATH_FIELD]
WORKERS = "app.kubernetes.io/component=worker"  # every pool's worker pods


def expected_products(base: str, ids: range | None = None) -> dict[str, dict[str, str]]:
    """url -> the record the site's product page must yield (the site's defaults: 4 x 25 books)."""
    products = catalog().products
    return {base + p.path: expected_record(p) for p in products if ids is None or p.id in ids}


def site_pages() -> int:
    """Pages a full crawl from the home page fetches: home, every listing page, every product."""
    cat = catalog()
    return 1 + sum(cat.pages(c) for c in cat.categories) + len(cat.products)


def job(name: str, pool: str, urls: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"pool": pool, "urls": urls, "extract": {"fields": FIELDS}, **spec},
    }


def job_status(node: RealNode, name: str) -> dict[str, Any]:
    return dict((node.get("scrapejob", name, NAMESPACE) or {}).get("status") or {})


def diagnose(node: RealNode, job_name: str | None = None) -> str:
    parts = [node.kubectl("get", "pods,deploy,scrapepools,scrapejobs", "-A", "-o", "wide", check=False)]
    if job_name:
        parts.append(node.kubectl("-n", NAMESPACE, "get", "scrapejob", job_name, "-o", "yaml", check=False)[-4000:])
    parts.append(node.kubectl("-n", NAMESPACE, "logs", "deploy/trawl-operator", "--tail=60", check=False))
    parts.append(node.kubectl("-n", NAMESPACE, "logs", "-l", WORKERS, "--tail=30", "--prefix", check=False))
    return "\n".join(parts)


def wait_finished(node: RealNode, name: str, timeout: float) -> dict[str, Any]:
    """The job once it has a completionTime (Succeeded or Failed); the diagnosis if it never gets one."""
    try:
        return wait_for(
            f"job {name} to finish", lambda: (s := job_status(node, name)).get("completionTime") and s, timeout, 2
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{diagnose(node, name)}") from None


def assert_succeeded(node: RealNode, name: str, status: dict[str, Any], total: int) -> None:
    counts = status.get("counts") or {}
    assert status.get("phase") == "Succeeded", (
        f"{status.get('phase')}: {status.get('message')} {status.get('deadLetters')}"
    )
    assert counts.get("succeeded") == total, counts
    assert counts.get("deadLettered", 0) == 0, status.get("deadLetters")
    obj = node.get("scrapejob", name, NAMESPACE)
    assert (condition(obj, "Ready") or {}).get("status") == "True", obj


def results(node: RealNode, name: str) -> dict[str, dict[str, Any]]:
    """The job's records from its Redis stream, read inside the bundled Redis pod (redis-cli), one per URL:
    a second record for a URL fails the test (nothing may be written twice)."""
    status = job_status(node, name)
    location = (status.get("results") or {}).get("location", "")
    assert location.startswith("redis: "), status.get("results")
    secret = node.get("secret", "trawl-redis", NAMESPACE) or {}
    password = base64.b64decode(secret["data"]["password"]).decode()
    raw = node.kubectl(
        "-n", NAMESPACE, "exec", "trawl-redis-0", "--", "env", f"REDISCLI_AUTH={password}",
        "redis-cli", "--raw", "XRANGE", location.removeprefix("redis: "), "-", "+",
    )  # fmt: skip
    lines = raw.splitlines()
    out: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(lines):
        fields = dict(zip(lines[i + 1 : i + 7 : 2], lines[i + 2 : i + 7 : 2], strict=True))
        url = fields["url"]
        assert url not in out, f"duplicate result for {url}"
        out[url] = json.loads(fields["data"])
        i += 7
    return out


def assert_records(got: dict[str, dict[str, Any]], expected: dict[str, dict[str, str]]) -> None:
    assert set(got) == set(expected), (
        f"missing {sorted(set(expected) - set(got))[:5]}, extra {sorted(set(got) - set(expected))[:5]}"
    )
    for url, record in got.items():
        assert {k: record.get(k) for k in expected[url]} == expected[url], url


def worker_pods(node: RealNode, pool: str) -> list[dict[str, Any]]:
    return node.items("pods", NAMESPACE, f"trawl.dev/pool={pool}")


def ready_workers(node: RealNode, pool: str) -> list[dict[str, Any]]:
    return [p for p in worker_pods(node, pool) if pod_ready(p)]


def wait_no_workers(node: RealNode, pool: str, timeout: float) -> float:
    started = time.monotonic()
    wait_for(f"pool {pool} to scale to zero pods", lambda: not worker_pods(node, pool) or None, timeout, 2)
    return time.monotonic() - started
