"""spec.onComplete: after the job finishes, a signed CloudEvent arrives and a batch/v1 Job is created from
the pool's template the job names (spec.onCompleteJobs), with the job's name, result location, counts and
parameters in its environment; both outcomes show on the ScrapeJob's status (the Job's progress is
followed: marked Complete here, as no kubelet runs). The job is written by the tenant, who may not create
Jobs. A webhook that always fails ends Failed after its bounded attempts. About 40 s.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from typing import Any

from operator_fixtures import WebhookReceiver, apply, exists, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for


def test_on_complete_webhook_and_job(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    receiver: WebhookReceiver,
    tenant: Any,
) -> None:
    key = secrets.token_hex(16)
    control_plane.kubectl("create", "secret", "generic", "hook-hmac", f"--from-literal=key={key}", "-n", namespace)
    control_plane.kubectl("label", "secret", "hook-hmac", "-n", namespace, "trawl.dev/secret=true")
    urls = list(bookstore.expected())[:3]
    template = {
        "metadata": {"labels": {"team": "data"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "load", "image": "example/loader:1", "env": [{"name": "MODE", "value": "x"}]}
                    ],
                }
            },
        },
    }
    # The pool's author offers the Job; the tenant picks it by name and passes a parameter.
    # The hook's key is a Secret the pool grants its jobs for signing (issue 32: mounted and declared).
    base = pool("after", redis_server.url, onCompleteJobs=[{"name": "load", "template": template}])
    base["spec"]["worker"]["secrets"] = ["hook-hmac"]
    base["spec"]["worker"]["secretKeys"] = [{"name": "hook-hmac", "key": "key", "use": "WebhookSigningKey"}]
    apply(control_plane, base, namespace=namespace)
    wait_for("Deployment", lambda: exists(control_plane, "deployment", "after-workers", namespace))
    on_complete = {
        "webhook": {"url": receiver.url, "secretRef": {"name": "hook-hmac", "key": "key"}},
        "job": {"template": "load", "parameters": [{"name": "TARGET", "value": "warehouse.books"}]},
    }
    tenant.apply(job("chained", "after", urls, onComplete=on_complete))
    wait_complete(control_plane, "chained", namespace, 120, operator.log_tail)
    uid = get(control_plane, "scrapejob", "chained", namespace)["metadata"]["uid"]

    def delivered() -> Any:
        return receiver.received()

    posts = wait_for("the CloudEvent", delivered, timeout=60, diag=operator.log_tail)
    headers, body = posts[0]
    assert headers["X-Trawl-Signature"] == "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
    assert headers["Content-Type"].startswith("application/cloudevents+json")
    event = json.loads(body)
    assert (event["specversion"], event["type"], event["id"]) == (
        "1.0",
        "dev.trawl.scrapejob.finished",
        f"{uid}/finished",
    )
    assert event["data"]["phase"] == "Succeeded" and event["data"]["counts"]["succeeded"] == 3
    assert event["data"]["results"]["count"] == 3

    jname = "chained-on-complete"
    created = wait_for("the Job", lambda: exists(control_plane, "job", jname, namespace), timeout=60)
    assert created
    batch_job = get(control_plane, "job", jname, namespace)
    assert batch_job["metadata"]["ownerReferences"][0]["uid"] == uid
    assert batch_job["metadata"]["labels"]["team"] == "data"
    env = {e["name"]: e.get("value") for e in batch_job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MODE"] == "x"  # the template's own env stays
    assert (env["TRAWL_JOB_NAME"], env["TRAWL_JOB_UID"], env["TRAWL_JOB_PHASE"]) == ("chained", uid, "Succeeded")
    assert env["TRAWL_RESULTS_SINK"] == "RedisStream" and env["TRAWL_RESULTS_COUNT"] == "3"
    assert env["TRAWL_RESULTS_LOCATION"].startswith("redis: ") and env["TRAWL_COUNT_SUCCEEDED"] == "3"
    assert env["TRAWL_PARAM_TARGET"] == "warehouse.books"
    assert batch_job["spec"]["template"]["spec"]["containers"][0]["image"] == "example/loader:1"  # the pool's

    def hooks() -> Any:
        status = get(control_plane, "scrapejob", "chained", namespace)["status"].get("onComplete") or {}
        return status if (status.get("webhook") or {}).get("state") == "Succeeded" and status.get("job") else None

    status = wait_for("status.onComplete", hooks, timeout=60, diag=operator.log_tail)
    assert status["job"]["name"] == jname and status["job"]["state"] == "Running"
    # No kubelet runs it here: mark the Job Complete as the job controller would, and the ScrapeJob follows.
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [
        {"type": t, "status": "True", "reason": "Done", "lastTransitionTime": now}
        for t in ("SuccessCriteriaMet", "Complete")
    ]
    done = {"status": {"conditions": conditions, "succeeded": 1, "startTime": now, "completionTime": now}}
    control_plane.kubectl(
        "patch", "job", jname, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(done)
    )

    def job_followed() -> Any:
        status = get(control_plane, "scrapejob", "chained", namespace)["status"].get("onComplete") or {}
        return (status.get("job") or {}).get("state") == "Succeeded" and status

    wait_for("onComplete.job Succeeded", job_followed, timeout=60, diag=operator.log_tail)
    assert len(receiver.received()) == 1  # delivered once


def test_on_complete_webhook_that_keeps_failing_ends_failed(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    receiver: WebhookReceiver,
) -> None:
    receiver.status = 503
    apply(control_plane, pool("after2", redis_server.url), namespace=namespace)
    urls = list(bookstore.expected())[:1]
    apply(
        control_plane,
        job("unheard", "after2", urls, onComplete={"webhook": {"url": receiver.url}}),
        namespace=namespace,
    )
    wait_complete(control_plane, "unheard", namespace, 120, operator.log_tail)

    def failed() -> Any:
        hook = (get(control_plane, "scrapejob", "unheard", namespace)["status"].get("onComplete") or {}).get("webhook")
        return hook if hook and hook["state"] == "Failed" else None

    hook = wait_for("onComplete.webhook Failed", failed, timeout=90, diag=operator.log_tail)
    assert hook["attempts"] == 5 and hook["message"] == "HTTP 503"
    posts = receiver.received()
    assert len(posts) == 5  # bounded: no more deliveries after the last attempt
    assert "X-Trawl-Signature" not in posts[0][0]  # no secretRef: unsigned
