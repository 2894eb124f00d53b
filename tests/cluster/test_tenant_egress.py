"""Issue 32, one address policy for every outbound connection, seen as the tenant (ScrapeJob rights only): what
a job names (a webhook, an onComplete webhook, a PostgreSQL or S3 sink) reaches only what the pool allows.

The pool allows 127.0.0.1/32 (the fixture site, the receiver); 127.0.0.2 stands for a protected address
(a cluster service, the node, the metadata service), and listens, so a test sees whether anything
reached it. About 60 s.
"""

from __future__ import annotations

from typing import Any

from operator_fixtures import WebhookReceiver, apply, condition, events_for, get, job, pool
from tenancy import Tenant

from listeners import ConnectionRecorder
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for

GUARDED = ["127.0.0.1/32"]
REFUSED = "refused: 127.0.0.2 is in blocked network 127.0.0.0/8"


def _status(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    return get(cp, "scrapejob", name, namespace).get("status") or {}


def _events(cp: ControlPlane, name: str, namespace: str) -> Any:
    """The job's SinkUnavailable Events, once there is one (the Event is posted after the status patch)."""

    def check() -> list[dict[str, Any]]:
        return [e for e in events_for(cp, namespace, name) if e["reason"] == "SinkUnavailable"]

    return check


def _stalled(cp: ControlPlane, name: str, namespace: str, reason: str) -> Any:
    def check() -> Any:
        cond = condition(get(cp, "scrapejob", name, namespace), "Stalled")
        return cond if cond is not None and cond["status"] == "True" and cond["reason"] == reason else None

    return check


def test_webhooks_never_follow_a_redirect_to_a_protected_address(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    receiver: WebhookReceiver,
    tenant: Tenant,
) -> None:
    """Seen in the review: the workers and the operator followed a 303 to the protected address, and the
    onComplete status said `delivered (HTTP 200)`. A webhook is POSTed to the URL given: a 3xx is a failure,
    not followed and not retried, and the status says why."""
    with WebhookReceiver(host="127.0.0.2") as protected:
        receiver.status, receiver.location = 303, f"{protected.url}/latest/meta-data/"
        apply(control_plane, pool("guarded", redis_server.url, worker=_worker()), namespace=namespace)
        urls = list(bookstore.expected())[:2]
        sink = {"sink": "Webhook", "webhook": {"url": receiver.url}}
        tenant.apply(
            job("sink-303", "guarded", urls, output=sink),
            job("hook-303", "guarded", urls[:1], onComplete={"webhook": {"url": receiver.url}}),
        )

        def hook_failed() -> Any:
            hook = (_status(control_plane, "hook-303", namespace).get("onComplete") or {}).get("webhook") or {}
            return hook if hook.get("state") in ("Failed", "Succeeded") else None

        hook = wait_for("onComplete.webhook settled", hook_failed, timeout=150, diag=operator.log_tail)
        assert hook["state"] == "Failed", hook
        assert hook["message"] == "redirect refused: webhooks are POSTed to the URL given (HTTP 303)"
        assert hook["attempts"] == 1  # not retried

        def warned() -> list[dict[str, Any]]:
            return [e for e in events_for(control_plane, namespace, "hook-303") if e["reason"] == "OnCompleteFailed"]

        (warning,) = wait_for("the OnCompleteFailed Event", warned, timeout=30)
        assert warning["message"] == f"onComplete.webhook: {hook['message']}"

        cond = wait_for("the sink's failure", _stalled(control_plane, "sink-303", namespace, "SinkFailing"), 150)
        assert "redirect refused: webhooks are POSTed to the URL given (HTTP 303)" in cond["message"], cond
        assert receiver.received(), "the receiver never got a POST"
        assert protected.received() == []  # nothing followed the redirect


def _worker(**extra: Any) -> dict[str, Any]:
    return {"concurrency": 16, "drainSeconds": 10, "allowedCidrs": GUARDED, **extra}


def test_sinks_outside_the_allowed_cidrs_are_refused_at_acceptance(
    control_plane: ControlPlane, namespace: str, operator: Any, redis_server: RedisServer, tenant: Tenant
) -> None:
    """Seen in the review: the S3 sink sent HEAD, PUT and list requests to the protected address, signed with
    the platform's access key, and the PostgreSQL sink sent its start-up packet there. Now the operator's
    acceptance check refuses the address before any connection: the job is Stalled with the reason."""
    keys = {"id": "AKIAPLATFORM", "secret": "platform-secret"}
    literals = [f"--from-literal={k}={v}" for k, v in keys.items()]
    control_plane.kubectl("create", "secret", "generic", "s3-keys", *literals, "-n", namespace)
    control_plane.kubectl(
        "label", "secret", "s3-keys", "-n", namespace, "trawl.dev/secret=true"
    )  # read by the operator
    granted = [
        {"name": "s3-keys", "key": "id", "use": "S3AccessKeyId"},
        {"name": "s3-keys", "key": "secret", "use": "S3SecretAccessKey"},
    ]
    worker = _worker(secrets=["s3-keys"], secretKeys=granted)
    apply(control_plane, pool("guarded", redis_server.url, worker=worker), namespace=namespace)
    with ConnectionRecorder(host="127.0.0.2") as protected:
        postgres = {"host": "127.0.0.2", "port": protected.port, "database": "d", "user": "u", "sslMode": "disable"}
        s3 = {
            "bucket": "results",
            "endpoint": f"http://{protected.address}",
            "pathStyle": True,
            "accessKeyIdSecretRef": {"name": "s3-keys", "key": "id"},
            "secretAccessKeySecretRef": {"name": "s3-keys", "key": "secret"},
        }
        urls = ["http://127.0.0.1:9/"]
        tenant.apply(
            job("pg-inside", "guarded", urls, output={"sink": "PostgreSQL", "postgres": postgres}),
            job("s3-inside", "guarded", urls, output={"sink": "S3", "s3": s3}),
        )
        for name, kind in (("pg-inside", "PostgreSQL"), ("s3-inside", "S3")):
            cond = wait_for(f"{name} Stalled", _stalled(control_plane, name, namespace, "SinkUnavailable"), 90)
            assert cond["message"].startswith(kind) and REFUSED in cond["message"], cond
            warnings = wait_for(f"{name}'s SinkUnavailable Event", _events(control_plane, name, namespace), 30)
            assert len(warnings) == 1 and REFUSED in warnings[0]["message"], warnings
            assert _status(control_plane, name, namespace).get("phase") in (None, "Pending")
        assert protected.count() == 0, protected.connections


def test_a_job_names_only_the_secret_keys_its_pool_grants_for_that_use(
    control_plane: ControlPlane, namespace: str, operator: Any, redis_server: RedisServer, tenant: Tenant
) -> None:
    """Seen in the review: a job could name any key of any Secret the pool mounts as an S3 access key ID (sent
    in the clear to a server of its choosing), and its onComplete.webhook.secretRef any Secret of the
    namespace, the status saying which Secrets and keys exist."""
    control_plane.kubectl("create", "secret", "generic", "pg", "--from-literal=password=db-pass", "-n", namespace)
    control_plane.kubectl("create", "secret", "generic", "hook", "--from-literal=hmac=k", "-n", namespace)
    worker = _worker(secrets=["pg"], secretKeys=[{"name": "pg", "key": "password", "use": "PostgresPassword"}])
    apply(control_plane, pool("granted", redis_server.url, worker=worker), namespace=namespace)
    s3 = {
        "bucket": "results",
        "endpoint": "https://store.example",
        "accessKeyIdSecretRef": {"name": "pg", "key": "password"},
        "secretAccessKeySecretRef": {"name": "pg", "key": "password"},
    }
    hook = {"webhook": {"url": "https://hook.example/", "secretRef": {"name": "hook", "key": "hmac"}}}
    urls = ["http://127.0.0.1:9/"]
    tenant.apply(
        job("as-access-key", "granted", urls, output={"sink": "S3", "s3": s3}),
        job("signed-hook", "granted", urls, onComplete=hook),
    )
    cond = wait_for(
        "Stalled/SecretKeyNotAllowed", _stalled(control_plane, "as-access-key", namespace, "SecretKeyNotAllowed"), 60
    )
    assert cond["message"].startswith(
        "spec.output.s3.accessKeyIdSecretRef names Secret key pg/password, which ScrapePool 'granted' does not "
        "declare for use S3AccessKeyId"
    ), cond
    cond = wait_for(
        "Stalled/SecretNotMounted", _stalled(control_plane, "signed-hook", namespace, "SecretNotMounted"), 60
    )
    assert "'hook'" in cond["message"] and "spec.worker.secrets" in cond["message"], cond
    for name in ("as-access-key", "signed-hook"):
        assert _status(control_plane, name, namespace).get("phase") in (None, "Pending")  # never registered
