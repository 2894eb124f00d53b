"""Scenario steps on a cluster where the chart is installed: jobs, waits, results, pod facts.

Shared by the real-node suite (tests/e2e) and the kind run (tests/e2e_kind): both serve the fixture site
of tests/e2e_kind/site.yaml and install the chart as release ``trawl`` into ``trawl-system``; a
:class:`RealNode` is any such cluster's kubeconfig, kubectl and helm."""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import kubernetes
from e2e_node import RealNode, condition, pod_ready

from trawl.api.naming import POD_DELETION_COST
from trawl.dev.bookstore import PRODUCT_FIELDS, PRODUCT_XPATH_FIELD, catalog, expected_record
from waits import wait_for

NAMESPACE = "trawl-system"
SITE = "http://bookstore.trawl-e2e-site.svc.cluster.local:8080"
SLOW_SITE = "http://bookstore-slow.trawl-e2e-site.svc.cluster.local:8080"
FIELDS = [*PRODUCT_FIELDS, PRODUCT_XPATH_FIELD]
WORKERS = "app.kubernetes.io/component=worker"  # every pool's worker pods
# Politeness off the critical path: the scenarios are about pods, not about rate limits.
FAST = {"requestsPerSecond": 200, "maxConcurrencyPerDomain": 48, "adaptiveDelay": False}


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


def crawl_completes_with_exact_results(node: RealNode, pool: str, name: str = "crawl") -> None:
    """Scenario 1: a crawl of the fixture site from its home page reaches Succeeded with exactly the
    product records. The home page links /private/, which robots.txt disallows: a skip, neither a
    result nor a failure."""
    spec = {
        "crawl": {"maxDepth": 6, "maxPages": 1000},
        "extract": {"fields": FIELDS, "onlyMatching": "/product/"},
    }
    node.apply([job(name, pool, [SITE + "/"], politeness=FAST, **spec)])
    status = wait_finished(node, name, 600)
    assert_succeeded(node, name, status, site_pages())
    assert_records(results(node, name), expected_products(SITE))


def worker_pods(node: RealNode, pool: str) -> list[dict[str, Any]]:
    return node.items("pods", NAMESPACE, f"trawl.dev/pool={pool}")


def ready_workers(node: RealNode, pool: str) -> list[dict[str, Any]]:
    return [p for p in worker_pods(node, pool) if pod_ready(p)]


def wait_no_workers(node: RealNode, pool: str, timeout: float) -> float:
    started = time.monotonic()
    wait_for(f"pool {pool} to scale to zero pods", lambda: not worker_pods(node, pool) or None, timeout, 2)
    return time.monotonic() - started


def site_fetches(node: RealNode, deployment: str, since: float) -> dict[str, int]:
    """path?query -> how often the fixture site (run with --access-log /dev/stdout) served it since
    ``since`` (epoch seconds): a task interrupted and retried is fetched twice."""
    out: dict[str, int] = {}
    for line in node.kubectl("-n", "trawl-e2e-site", "logs", f"deploy/{deployment}", "--tail=-1").splitlines():
        parts = line.split()
        stamped = len(parts) >= 4 and parts[1] == "GET" and parts[0].replace(".", "", 1).isdigit()
        if stamped and float(parts[0]) >= since and parts[2].startswith("/product/"):
            out[parts[2]] = out.get(parts[2], 0) + 1
    return out


@dataclass
class Deletion:
    """A worker pod the ReplicaSet chose to delete: its pod-deletion-cost then, and those of the Ready
    pods it kept (None: no cost set)."""

    pod: str
    cost: int | None
    ready: bool  # the ReplicaSet deletes a pod that is not Ready first, whatever its cost
    kept: dict[str, int | None]
    # The deleted pod's cost before the operator's last change of it. The operator writes the costs of
    # one snapshot of the workers' in-flight counts, then scales down; a pod chosen as idle still claims
    # work until the ReplicaSet deletes it, and the next pass may write its new cost first (CI saw a
    # pod chosen at cost 0 deleted with 1001 written a pass later).
    earlier_cost: int | None = None
    seen_at: float = 0.0  # time.monotonic() when the watch reported it


# A step down deletes its pods in one ReplicaSet sync, but the watch reports them one at a time: pods
# reported within this long of each other went in the same step (the operator's steps come at least one
# poll apart, 2 s in these scenarios).
SAME_STEP_SECONDS = 1.0


def _cost(pod: Any) -> int | None:
    value = (pod.metadata.annotations or {}).get(POD_DELETION_COST)
    return int(value) if value is not None else None


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


@dataclass
class PodDeletions:
    """Watches a pool's worker pods (a Kubernetes watch, so no deletion is missed between polls) and
    records each deletion with the costs the ReplicaSet chose by."""

    node: RealNode
    pool: str
    deletions: list[Deletion] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def __enter__(self) -> PodDeletions:
        self._thread = threading.Thread(target=self._run, name=f"pod-deletions-{self.pool}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        config = self.node.kubeconfig
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=config))  # type: ignore[no-untyped-call]
        selector = f"trawl.dev/pool={self.pool}"
        try:
            listing: Any = api.list_namespaced_pod(NAMESPACE, label_selector=selector)
            pods: dict[str, Any] = {p.metadata.name: p for p in listing.items}
            version = listing.metadata.resource_version
            seen: set[str] = set()
            earlier: dict[str, int | None] = {}
            while not self._stop.is_set():
                # Short watches from the last version seen: no event lost between them, and a prompt stop.
                watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                for event in watch.stream(  # type: ignore[no-untyped-call]
                    api.list_namespaced_pod,
                    NAMESPACE,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=2,
                ):
                    pod = event["object"]
                    name = pod.metadata.name
                    version = pod.metadata.resource_version
                    if event["type"] == "DELETED":
                        pods.pop(name, None)
                    else:
                        before = pods.get(name)
                        if before is not None and _cost(before) != _cost(pod):
                            earlier[name] = _cost(before)
                        pods[name] = pod
                    if pod.metadata.deletion_timestamp is not None and name not in seen:
                        seen.add(name)
                        kept = {
                            n: _cost(p) for n, p in pods.items() if p.metadata.deletion_timestamp is None and _ready(p)
                        }
                        self.deletions.append(
                            Deletion(name, _cost(pod), _ready(pod), kept, earlier.get(name), time.monotonic())
                        )
                    if self._stop.is_set():
                        watch.stop()  # type: ignore[no-untyped-call]
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc

    def kept(self, d: Deletion) -> dict[str, int | None]:
        """The Ready pods that outlived ``d``'s step: those it saw not deleted, less the ones deleted in
        the same step whose own deletion the watch reported just after."""
        same_step = {o.pod for o in self.deletions if abs(o.seen_at - d.seen_at) < SAME_STEP_SECONDS}
        return {n: c for n, c in d.kept.items() if n not in same_step}
