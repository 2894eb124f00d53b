"""Hostile specs from the least-trusted user: every string a ScrapeJob or CronScrapeJob carries, replaced by
values built to hurt (injections, regex and XPath bombs, protected addresses, huge and control characters),
plus a URL range as large as the API allows. Applied as a tenant (ScrapeJob/CronScrapeJob rights only).

What must hold (issue 32): the operator stays up, its memory stays bounded, and every object is either
refused by the API server or has a status (its generation observed, a Ready or Stalled condition) within
10 seconds of being applied.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_fixtures import apply, pool
from tenancy import Tenant

from trawl.api.common import parse_time
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for

pytestmark = pytest.mark.cluster

STATUS_SECONDS = 10.0
# The chart gives the operator 512 MiB; one job must not take it near that. What the operator needs for
# ~150 objects is a fraction of it; the bound leaves room for a loaded machine's allocator.
RSS_LIMIT_MB = 400

HOSTILE = [
    "",
    " ",
    "x" * 20_000,
    "\x00",
    "a\r\nX-Injected: yes",
    "../../../../../etc/passwd",
    "${jndi:ldap://127.0.0.1/a}",
    "{{ .Values }}{n}{n}{n}",
    "$(touch /tmp/pwned)",
    "(a+)+$",
    "((a|aa)*)*b",
    "count(//*)*count(//*)*count(//*)",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:127.0.0.1]:6379/",
    "http://0x7f000001/",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "\u202egnp.exe",
    "\U0001f600" * 100,
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "127.0.0.1,169.254.169.254",
    "trawl-operator",
]


def base_specs(pool_name: str, site: str) -> list[dict[str, Any]]:
    """Valid specs that together carry every string field a job author writes, one per sink."""
    ref = {"name": "job-secret", "key": "key"}
    common: dict[str, Any] = {
        "pool": pool_name,
        "urls": [f"{site}/"],
        "urlRanges": [{"template": f"{site}/catalogue/page-{{n}}.html", "start": 1, "end": 3}],
        "crawl": {"maxDepth": 1, "maxPages": 5, "include": [r"/catalogue/"], "exclude": [r"\.pdf$"]},
        "extract": {
            "fields": [
                {"name": "title", "selector": "h1"},
                {"name": "price", "selector": "//p[@class='price']", "kind": "XPath", "attribute": "class"},
            ],
            "onlyMatching": r"/catalogue/",
        },
        "request": {"headers": {"X-Team": "a"}, "userAgent": "tenant-bot"},
        "onComplete": {"webhook": {"url": f"{site}/hook", "secretRef": ref}},
        "suspend": True,  # the operator must judge the spec; nothing needs to be fetched
    }
    outputs: list[dict[str, Any]] = [
        {"sink": "RedisStream"},
        {"sink": "JsonLines", "jsonLines": {"directory": "/data/out"}},
        {"sink": "Webhook", "webhook": {"url": f"{site}/sink", "secretRef": ref}},
        {
            "sink": "PostgreSQL",
            "postgres": {
                "host": "db.example.internal",
                "database": "scrapes",
                "user": "trawl",
                "table": "records",
                "sslMode": "prefer",
                "passwordSecretRef": ref,
            },
        },
        {
            "sink": "S3",
            "s3": {
                "bucket": "results",
                "prefix": "team/",
                "endpoint": "https://s3.example.com",
                "region": "eu-west-1",
                "accessKeyIdSecretRef": ref,
                "secretAccessKeySecretRef": ref,
            },
        },
    ]
    render = {"mode": "Browser", "waitFor": "Selector", "selector": "#ready", "onlyMatching": r"/catalogue/"}
    specs = [{**common, "output": output} for output in outputs]
    specs.append({**common, "render": render})
    return specs


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], bool]]:
    """Every string in a spec: (path, is a mapping key)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if path and path[-1] == "headers":
                yield (*path, key), True
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    elif isinstance(value, str):
        yield path, False


def _replaced(spec: dict[str, Any], path: tuple[Any, ...], is_key: bool, hostile: str) -> dict[str, Any]:
    out: Any = json.loads(json.dumps(spec))
    node = out
    for step in path[:-1]:
        node = node[step]
    if is_key:
        node[hostile] = node.pop(path[-1])
    else:
        node[path[-1]] = hostile
    return dict(out)


def hostile_specs(pool_name: str, site: str) -> list[dict[str, Any]]:
    """Each string field of each base spec (the pool's name aside) with four hostile values in turn."""
    specs: list[dict[str, Any]] = []
    turn = 0
    for base in base_specs(pool_name, site):
        for path, is_key in _leaves(base):
            if path == ("pool",) or (path[:1] == ("output",) and path[-1] == "sink"):
                continue
            for _ in range(4):
                specs.append(_replaced(base, path, is_key, HOSTILE[turn % len(HOSTILE)]))
                turn += 1
    # The largest URL range the API accepts, of long URLs: the operator must not hold it in memory.
    long_path = "p" * 1800
    specs.append(
        {
            "pool": pool_name,
            "urlRanges": [{"template": f"{site}/{long_path}/{{n}}", "start": 0, "end": 999_999}],
            "suspend": True,
        }
    )
    return specs


class RssWatch(threading.Thread):
    """Samples a process's resident memory (VmRSS) until stopped; the peak is kept."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.status = Path(f"/proc/{pid}/status")
        self.peak_mb = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            try:
                line = next(x for x in self.status.read_text().splitlines() if x.startswith("VmRSS:"))
            except (OSError, StopIteration):
                return
            self.peak_mb = max(self.peak_mb, int(line.split()[1]) / 1024)


def _observed(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    types = {c.get("type") for c in status.get("conditions") or []}
    return status.get("observedGeneration") == obj["metadata"].get("generation") and bool(types & {"Ready", "Stalled"})


def _judged_after(obj: dict[str, Any]) -> float:
    """Seconds from the object's creation to its first condition."""
    created = parse_time(obj["metadata"]["creationTimestamp"])
    times = [parse_time(c.get("lastTransitionTime")) for c in (obj.get("status") or {}).get("conditions") or []]
    first = min(t for t in times if t is not None)
    assert created is not None
    return (first - created).total_seconds()


def test_hostile_specs_are_refused_or_judged_and_the_operator_stays_up(
    control_plane: ControlPlane, namespace: str, operator: Any, tenant: Tenant, redis_server: RedisServer
) -> None:
    site = "http://127.0.0.1:9"  # nothing is fetched: every job is suspended
    apply(control_plane, pool("shared", redis_server.url), namespace=namespace)
    watch = RssWatch(operator.proc.pid)
    watch.start()
    applied: list[str] = []
    refused = 0
    specs = hostile_specs("shared", site)
    crons = [
        {"schedule": hostile, "jobTemplate": {"spec": {"pool": "shared", "urls": [f"{site}/"]}}} for hostile in HOSTILE
    ] + [
        {"schedule": "*/5 * * * *", "timeZone": hostile, "jobTemplate": {"spec": specs[i]}}
        for i, hostile in enumerate(HOSTILE)
    ]
    objects = [("ScrapeJob", f"hostile-{i}", spec) for i, spec in enumerate(specs)]
    objects += [("CronScrapeJob", f"hostile-cron-{i}", spec) for i, spec in enumerate(crons)]
    try:
        for kind, name, spec in objects:
            body = {"apiVersion": "trawl.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
            out = tenant.apply(body, check=False)
            if out.returncode != 0:
                refused += 1  # the API server refused it (schema, CEL): the author sees why at once
                continue
            applied.append(f"{kind.lower()}/{name}")
        objects_now: dict[str, dict[str, Any]] = {}

        def all_judged() -> bool:
            for kind in ("scrapejobs", "cronscrapejobs"):
                out = control_plane.kubectl("get", kind, "-n", namespace, "-o", "json")
                for obj in json.loads(out.stdout)["items"]:
                    objects_now[f"{obj['kind'].lower()}/{obj['metadata']['name']}"] = obj
            return all(ref in objects_now and _observed(objects_now[ref]) for ref in applied)

        wait_for("every applied object has a status", all_judged, timeout=STATUS_SECONDS * 6, interval=1.0)
        assert operator.running, operator.log_tail(80)
        # When each was first judged: its conditions' earliest transition, against its creation (the API
        # server's clock and the operator's are this machine's; both are whole seconds).
        late = {ref: delay for ref in applied if (delay := _judged_after(objects_now[ref])) > STATUS_SECONDS + 1}
        assert late == {}, f"judged later than {STATUS_SECONDS}s after creation: {late}"
    finally:
        watch.stopping.set()
        watch.join()
    assert refused + len(applied) == len(objects) and len(applied) > 50, (refused, len(applied))
    assert watch.peak_mb < RSS_LIMIT_MB, f"operator RSS peaked at {watch.peak_mb:.0f} MB"
    print(f"[tenant fuzz] {len(objects)} objects: {refused} refused by the API server, {len(applied)} judged; "
          f"operator RSS peak {watch.peak_mb:.0f} MB")  # fmt: skip
