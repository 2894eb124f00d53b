"""Issue 32, as the tenant (ScrapeJob rights only, tenancy.py): limits a job author cannot raise.

- A million-URL range of long URLs: the shared operator enqueues it a batch at a time, its memory flat
  while it does and on every pass after (before: the whole list on every pass, 2 GB, an OOM kill and a
  crash loop that stopped every namespace's jobs).
- A job asking for more than its pool grants (the finding's 1 GiB bodies, 10,000 requests/s, 1,000 per
  domain, the highest priority; more URLs, results or pages than the pool allows) is Stalled with reason
  LimitExceeded naming the field, its value and the ceiling, one Warning Event, nothing of it in Redis.
- A job within the ceilings runs to Complete, with what it left unset resolved within them, and keeps at
  most the pool's dead-letter records (the oldest dropped, counted).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from metrics_page import Scrape
from operator_fixtures import apply, condition, events_for, get, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from waits import wait_for

MILLION = 1_000_000
# A long URL (300 characters): a million of them are 300 MB of text alone, twice that as Python strings
# and the dedupe set the operator built of them.
LONG = "http://127.0.0.1:9/catalogue/" + "x" * 260 + "/page-{n}.html"
# What the operator may add to its resident memory while it enqueues a million URLs and afterwards: a
# batch is 2,000 URLs (0.6 MB, and as much again as the command sent to Redis); the rest is what one
# reconcile pass allocates anyway. Holding the list once would add more than ten times this.
RSS_BOUND_MB = 48


def _job(name: str, pool_name: str, **spec: Any) -> dict[str, Any]:
    body = {"pool": pool_name, **spec}
    return {"apiVersion": "trawl.dev/v1alpha1", "kind": "ScrapeJob", "metadata": {"name": name}, "spec": body}


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


@contextmanager
def _peak_rss(pid: int) -> Iterator[list[float]]:
    """The process's peak VmRSS (MB) while the block runs, sampled every 50 ms: ``[peak]``."""
    peak = [_rss_mb(pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _rss_mb(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join(timeout=5)


def _status(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    return get(cp, "scrapejob", name, namespace).get("status") or {}


def _job_passes(operator: Any) -> float:
    return Scrape(operator.metrics_text()).value("trawl_operator_reconcile_seconds_count", kind="ScrapeJob")


def _forget_namespace(client: redis.Redis, namespace: str) -> None:
    for key in client.scan_iter(match=f"trawl:{{{namespace}/*", count=1000):
        client.unlink(key)


def test_a_million_url_range_keeps_the_shared_operators_memory_flat(
    control_plane: ControlPlane, namespace: str, operator: Any, tenant: Any, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    pid = operator.proc.pid
    try:
        # The platform grants this pool a million URLs a job; the tenant asks for all of them.
        apply(control_plane, pool("big", redis_server.url, jobLimits={"maxUrlsPerJob": MILLION}), namespace=namespace)
        # A first small job: the operator's first pass over a job loads what every pass needs.
        tenant.apply(_job("warm", "big", urls=["http://127.0.0.1:9/warm"]))
        wait_for("the first job's pass", lambda: _status(control_plane, "warm", namespace).get("enqueued") == 1, 120)
        baseline = max(_rss_mb(pid) for _ in range(3))
        with _peak_rss(pid) as peak:
            tenant.apply(_job("million", "big", urlRanges=[{"template": LONG, "start": 1, "end": MILLION}]))

            def all_in() -> Any:
                status = _status(control_plane, "million", namespace)
                done = status.get("enqueued") == MILLION and (status.get("counts") or {}).get("total") == MILLION
                return done and status

            status = wait_for("a million URLs enqueued", all_in, 300, 0.5, diag=operator.log_tail)
            passes = _job_passes(operator)
            # Later passes (two jobs, so ten passes are five over each) read the cursor and add nothing.
            wait_for("five more passes over each job", lambda: _job_passes(operator) >= passes + 10, 60)
        grew = peak[0] - baseline
        assert grew < RSS_BOUND_MB, f"the operator grew by {grew:.0f} MB (from {baseline:.0f} MB)"
        assert status["phase"] == "Queued" and operator.running
        assert client.llen(Keys(f"trawl:{{{namespace}/big}}").ready(_uid(control_plane, namespace))) == MILLION
    finally:
        tenant.kubectl("delete", "scrapejob", "million", "--wait=false", check=False)
        _forget_namespace(client, namespace)
        client.close()


def _uid(cp: ControlPlane, namespace: str, name: str = "million") -> str:
    return str(get(cp, "scrapejob", name, namespace)["metadata"]["uid"])


# The finding's values, each on a pool that sets no limits (the defaults hold), and what the pool's Redis
# would hold, on a pool that sets small ones: (job, the spec, what the message names).
ABOVE: list[tuple[str, str, dict[str, Any], str]] = [
    ("body", "open", {"request": {"maxResponseBytes": 1 << 30}},
     "spec.request.maxResponseBytes 1073741824 is above the 10485760"),
    ("rate", "open", {"politeness": {"requestsPerSecond": 10000}},
     "spec.politeness.requestsPerSecond 10000 is above the 100"),
    ("conc", "open", {"politeness": {"maxConcurrencyPerDomain": 1000}},
     "spec.politeness.maxConcurrencyPerDomain 1000 is above the 32"),
    ("prio", "open", {"priority": 9}, "spec.priority 9 is above the 5"),
    ("urls", "small", {"urlRanges": [{"template": "http://127.0.0.1:9/{n}", "start": 1, "end": 51}]},
     "spec.urls and spec.urlRanges: 51 URLs is above the 50"),
    ("pages", "small", {"crawl": {"maxPages": 51}}, "spec.crawl.maxPages 51 is above the 50"),
    ("results", "small", {"output": {"redisStream": {"maxLen": 1001}}},
     "spec.output.redisStream.maxLen 1001 is above the 1000"),
]  # fmt: skip
SMALL = {"maxUrlsPerJob": 50, "maxResultsRetained": 1000, "maxDeadLettersRetained": 2, "maxPriority": 6}


def test_a_job_asking_above_its_pools_ceilings_is_stalled_naming_the_limit(
    control_plane: ControlPlane, namespace: str, operator: Any, tenant: Any, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        open_pool = pool("open", redis_server.url)
        open_pool["spec"].pop("jobLimits", None)  # the defaults a platform gets without setting any
        apply(control_plane, open_pool, pool("small", redis_server.url, jobLimits=SMALL), namespace=namespace)
        for name, pool_name, spec, _ in ABOVE:
            spec = {"urls": ["http://127.0.0.1:9/a"], **spec}
            if "urlRanges" in spec:
                spec.pop("urls")
            tenant.apply(_job(name, pool_name, **spec))

        def stalled(name: str) -> Any:
            cond = condition(get(control_plane, "scrapejob", name, namespace), "Stalled") or {}
            return cond.get("status") == "True" and cond.get("reason") == "LimitExceeded" and cond

        for name, pool_name, _, message in ABOVE:
            cond = wait_for(f"{name} Stalled LimitExceeded", lambda n=name: stalled(n), diag=operator.log_tail)
            assert cond["message"].startswith(message), cond["message"]
            assert f"that ScrapePool '{pool_name}' allows (its spec.jobLimits." in cond["message"]
        passes = _job_passes(operator)
        wait_for("more passes over the jobs", lambda: _job_passes(operator) >= passes + 2 * len(ABOVE), 60)
        for name, _, _, _ in ABOVE:
            obj = get(control_plane, "scrapejob", name, namespace)
            assert condition(obj, "Ready")["status"] == "False"  # type: ignore[index]
            reasons = Counter(e["reason"] for e in events_for(control_plane, namespace, name))
            assert reasons["LimitExceeded"] == 1, (name, reasons)  # told once, not at every pass
            # Nothing of it was registered or enqueued.
            pool_name = obj["spec"]["pool"]
            assert not client.exists(Keys(f"trawl:{{{namespace}/{pool_name}}}").job(obj["metadata"]["uid"]))
        assert operator.running
    finally:
        _forget_namespace(client, namespace)
        client.close()


def test_a_job_within_its_pools_ceilings_runs_within_them(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    tenant: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    limits = {**SMALL, "maxResponseBytes": 1 << 20, "requestsPerSecond": 50, "maxConcurrencyPerDomain": 8}
    try:
        apply(control_plane, pool("shop", redis_server.url, jobLimits=limits), namespace=namespace)
        urls = [bookstore.product_url(i) for i in range(1, 11)]
        gone = [f"{bookstore.url}/hostile/404?id={i}" for i in range(4)]
        spec = {"urls": urls + gone, "priority": 6, "maxDeadLetters": 4, "politeness": {"requestsPerSecond": 50}}
        tenant.apply(_job("within", "shop", **spec))
        wait_complete(control_plane, "within", namespace, 180, operator.log_tail)
        status = _status(control_plane, "within", namespace)
        assert status["phase"] == "Succeeded" and status["results"]["count"] == 10
        # Four dead letters counted, the pool's two latest records kept, the other two dropped and counted.
        assert status["counts"]["deadLettered"] == 4 and status["counts"]["deadLettersDropped"] == 2
        assert len(status["deadLetters"]) == 2
        # What the job left unset, its workers got within the pool's ceilings.
        uid = _uid(control_plane, namespace, "within")
        worker_spec = json.loads(client.get(Keys(f"trawl:{{{namespace}/shop}}").spec(uid)) or "{}")
        assert worker_spec["request"]["max_response_bytes"] == 1 << 20  # not the built-in 10 MiB
        assert worker_spec["output"]["redis_stream"]["max_len"] == 1000  # not the built-in 100,000
        assert worker_spec["politeness"]["requests_per_second"] == 50
    finally:
        _forget_namespace(client, namespace)
        client.close()
