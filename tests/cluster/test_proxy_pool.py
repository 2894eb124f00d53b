"""Proxies end to end: a pool's proxy group from a Secret (the supervisor mounts it as the kubelet would),
a job fetched through it by the pool's workers, a job naming a group the pool does not define stalled with
an Event, and the proxy's password nowhere in clear: not in statuses, Events, worker or operator logs, or
Redis. About 15 s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from operator_fixtures import apply, condition, events_for, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.proxy_servers import TinyProxy
from trawl.dev.redis_server import RedisServer
from waits import wait_for

PASSWORD = "cluster-Proxy-pw-7"


@pytest.fixture
def tiny() -> Iterator[TinyProxy]:
    with TinyProxy(username="scraper", password=PASSWORD) as proxy:
        yield proxy


def _redis_text(url: str) -> str:
    client = redis.Redis.from_url(url)
    parts: list[str] = []
    try:
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            value: Any = {
                "string": client.get,
                "hash": client.hgetall,
                "list": lambda k: client.lrange(k, 0, -1),
                "set": client.smembers,
                "zset": lambda k: client.zrange(k, 0, -1),
                "stream": client.xrange,
            }.get(kind, lambda k: b"")(key)
            parts.append(f"{key!r} {value!r}")
    finally:
        client.close()
    return "\n".join(parts)


def test_a_pools_proxy_group_carries_its_jobs_and_its_password_stays_secret(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    tiny: TinyProxy,
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "proxies", "labels": {"trawl.dev/secret": "true"}},
        "stringData": {"urls": tiny.url("scraper", PASSWORD) + "\n"},
    }
    groups = [{"name": "dc", "secretRef": {"name": "proxies", "key": "urls"}, "default": True}]
    body = pool("px", redis_server.url, proxies={"groups": groups})
    body["spec"]["worker"]["secrets"] = ["proxies"]
    apply(control_plane, secret, body, namespace=namespace)
    urls = list(bookstore.expected())[:5]
    through = job("through", "px", urls, politeness={"requestsPerSecond": 100}, session={"poolSize": 2})
    apply(control_plane, through, namespace=namespace)
    apply(control_plane, job("elsewhere", "px", urls[:1], proxy={"group": "residential"}), namespace=namespace)

    def stalled() -> Any:
        cond = condition(get(control_plane, "scrapejob", "elsewhere", namespace), "Stalled")
        return cond is not None and cond["status"] == "True" and cond

    cond = wait_for("Stalled/UnknownProxyGroup", stalled, timeout=60, diag=operator.log_tail)
    assert cond["reason"] == "UnknownProxyGroup" and "'residential'" in cond["message"] and "dc" in cond["message"]
    wait_for(
        "the UnknownProxyGroup Event",
        lambda: any(e.get("reason") == "UnknownProxyGroup" for e in events_for(control_plane, namespace, "elsewhere")),
        timeout=60,
    )

    wait_complete(control_plane, "through", namespace, 120, operator.log_tail)
    requests = [line for line in tiny.log().splitlines() if "Request (file descriptor" in line]
    for url in urls:  # every page through the proxy (robots.txt goes direct: docs/security.md)
        path = url.split("/", 3)[3]
        assert any(path in line for line in requests), (url, requests)

    def proxies_shown() -> Any:  # the pool's status: each proxy's use, host:port only
        rows = get(control_plane, "scrapepool", "px", namespace).get("status", {}).get("proxies") or []
        return rows if sum(r["requests"] for r in rows) >= len(urls) else None

    rows = wait_for("the pool's status.proxies", proxies_shown, timeout=60, diag=operator.log_tail)
    assert [(r["group"], r["proxy"], r["health"]) for r in rows] == [("dc", f"127.0.0.1:{tiny.port}", "Healthy")]

    shown = [
        json.dumps(get(control_plane, kind, name, namespace))
        for kind, name in (("scrapejob", "through"), ("scrapejob", "elsewhere"), ("scrapepool", "px"))
    ]
    shown.append(control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)
    shown += [p.read_text(errors="replace") for p in supervisor.log_dir.glob("*.log")]
    shown += [operator.log_path.read_text(errors="replace"), _redis_text(redis_server.url)]
    for text in shown:
        assert PASSWORD not in text
