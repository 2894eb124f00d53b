"""A webhook sink signed with a Secret the pool mounts into its workers; a Secret it does not mount stalls the job."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

from operator_fixtures import WebhookReceiver, apply, condition, exists, get, job, pool, wait_complete

from trawl.dev.bookstore import PRODUCT_FIELDS
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for


def test_webhook_signed_with_a_mounted_secret_and_unmounted_secret_stalls(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    receiver: WebhookReceiver,
) -> None:
    key = secrets.token_hex(16)
    control_plane.kubectl("create", "secret", "generic", "webhook-hmac", f"--from-literal=key={key}", "-n", namespace)
    control_plane.kubectl("label", "secret", "webhook-hmac", "-n", namespace, "trawl.dev/secret=true")
    base = pool("hooks", redis_server.url)
    base["spec"]["worker"]["secrets"] = ["webhook-hmac"]
    # Mounted and declared for signing: the only keys a job may name (issue 32).
    base["spec"]["worker"]["secretKeys"] = [{"name": "webhook-hmac", "key": "key", "use": "WebhookSigningKey"}]
    apply(control_plane, base, namespace=namespace)
    wait_for("Deployment", lambda: exists(control_plane, "deployment", "hooks-workers", namespace))

    expected = dict(list(bookstore.expected().items())[:7])
    output = {
        "sink": "Webhook",
        "webhook": {"url": receiver.url, "batchSize": 2, "secretRef": {"name": "webhook-hmac", "key": "key"}},
    }
    spec = {"extract": {"fields": PRODUCT_FIELDS}, "output": output, "politeness": {"requestsPerSecond": 100}}
    apply(control_plane, job("signed", "hooks", list(expected), **spec), namespace=namespace)

    unmounted = {**output, "webhook": {**output["webhook"], "secretRef": {"name": "elsewhere", "key": "key"}}}
    apply(control_plane, job("unmounted", "hooks", list(expected)[:1], output=unmounted), namespace=namespace)

    def stalled() -> Any:
        obj = get(control_plane, "scrapejob", "unmounted", namespace)
        cond = condition(obj, "Stalled")
        return cond is not None and cond["status"] == "True" and cond

    cond = wait_for("Stalled/SecretNotMounted", stalled, timeout=60, diag=operator.log_tail)
    assert cond["reason"] == "SecretNotMounted"
    assert "'elsewhere'" in cond["message"] and "spec.worker.secrets" in cond["message"]

    wait_complete(control_plane, "signed", namespace, 120, operator.log_tail)
    posts = [(headers.get("X-Trawl-Signature"), body) for headers, body in receiver.received()]
    assert posts, "no webhook POST arrived"
    records: dict[str, dict[str, Any]] = {}
    for signature, body in posts:
        assert signature == "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
        for record in json.loads(body)["records"]:
            records[record["url"]] = record
    assert set(records) == set(expected)
    for url, fields in expected.items():
        want = {k: v for k, v in fields.items() if k != "rating"}  # rating comes from an XPath field not asked here
        assert {k: records[url][k] for k in want} == want
    assert get(control_plane, "scrapejob", "unmounted", namespace)["status"].get("phase") in (None, "Pending")


def test_pool_reports_a_missing_worker_secret_until_it_exists(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    base = pool("needs", redis_server.url)
    base["spec"]["worker"]["secrets"] = ["absent"]
    apply(control_plane, base, namespace=namespace)
    urls = list(bookstore.expected())[:3]
    apply(control_plane, job("waits", "needs", urls, extract={"fields": PRODUCT_FIELDS}), namespace=namespace)

    def stalled() -> Any:
        obj = get(control_plane, "scrapepool", "needs", namespace)
        cond = condition(obj, "Stalled")
        return cond is not None and cond["status"] == "True" and cond["reason"] == "SecretNotFound" and obj

    obj = wait_for("pool Stalled/SecretNotFound", stalled, timeout=60, diag=operator.log_tail)
    msg = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert "'absent'" in msg and "spec.worker.secrets" in msg
    assert supervisor.live(namespace, "needs-workers") == 0  # as a kubelet would, no worker without its Secret

    control_plane.kubectl("create", "secret", "generic", "absent", "--from-literal=k=v", "-n", namespace)
    control_plane.kubectl("label", "secret", "absent", "-n", namespace, "trawl.dev/secret=true")
    wait_complete(control_plane, "waits", namespace, 120, operator.log_tail)
    assert condition(get(control_plane, "scrapepool", "needs", namespace), "Stalled")["status"] == "False"  # type: ignore[index]
