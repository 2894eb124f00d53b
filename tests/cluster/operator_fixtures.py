"""Shared helpers of the operator's cluster tests: the operator as its ServiceAccount, objects, Kubernetes reads."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trawl.dev.controlplane import ControlPlane


def apply(cp: ControlPlane, *objs: dict[str, Any], namespace: str | None = None) -> None:
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    cp.kubectl(*args, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def get(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    out = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def exists(cp: ControlPlane, kind: str, name: str, namespace: str) -> bool:
    out = cp.kubectl("get", kind, name, "-n", namespace, "-o", "name", check=False)
    return out.returncode == 0


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def events_for(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    out = cp.kubectl("get", "events", "-n", namespace, "-o", "json", f"--field-selector=involvedObject.name={name}")
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return items


def pool(name: str, redis_url: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "redis": {"url": redis_url},
        "worker": {"concurrency": 16, "drainSeconds": 10, "allowedCidrs": ["127.0.0.0/8"]},
        "autoscaling": {
            "minReplicas": 0,
            "maxReplicas": 3,
            "scaleDownDelaySeconds": 5,
            "idleSecondsBeforeZero": 5,
            "pollSeconds": 1,
        },
        "queue": {"leaseSeconds": 5},
        # The platform's grant to the tests' pools, which fetch from a loopback fixture site far faster than
        # the default ceilings allow a shared cluster's jobs (tests/cluster/test_tenant_limits.py tests those).
        "jobLimits": {"requestsPerSecond": 10000, "maxConcurrencyPerDomain": 1000, "maxPriority": 9},
    }
    body.update(spec)
    return {"apiVersion": "trawl.dev/v1alpha1", "kind": "ScrapePool", "metadata": {"name": name}, "spec": body}


def job(name: str, pool_name: str, urls: list[str], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"pool": pool_name, "urls": urls}
    body.update(spec)
    return {"apiVersion": "trawl.dev/v1alpha1", "kind": "ScrapeJob", "metadata": {"name": name}, "spec": body}


def wait_complete(cp: ControlPlane, name: str, namespace: str, timeout: int, diag: Callable[[], str]) -> None:
    """`kubectl wait --for=condition=Complete`, exactly as a user or a CI pipeline would run it."""
    done = cp.kubectl(
        "wait", "--for=condition=Complete", f"scrapejob/{name}", "-n", namespace, f"--timeout={timeout}s",
        check=False, timeout=timeout + 30,
    )  # fmt: skip
    if done.returncode != 0:
        status = json.dumps((get(cp, "scrapejob", name, namespace).get("status") or {}), indent=1)[:3000]
        raise AssertionError(f"{name} not Complete: {done.stderr}\nstatus: {status}\n{diag()}")


class WebhookReceiver(ThreadingHTTPServer):
    """A real HTTP server on a loopback port that records every POST (headers, body) and answers
    ``status``: the far end of webhook sinks and onComplete webhooks. With ``location`` set it answers
    ``status`` (a 3xx) with that Location; it records the requests of other methods too (what a
    followed 303 sends), so another one on 127.0.0.2 stands for a protected address."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__((host, 0), _WebhookHandler)
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.status = 204
        self.location: str | None = None
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}/hook"

    def received(self) -> list[tuple[dict[str, str], bytes]]:
        with self.lock:
            return list(self.posts)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class _WebhookHandler(BaseHTTPRequestHandler):
    server: WebhookReceiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.posts.append((dict(self.headers), body))
        self.send_response(self.server.status)
        if self.server.location is not None:
            self.send_header("Location", self.server.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_PUT = do_DELETE = do_HEAD = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass
