"""spec.onComplete decisions: when a hook acts again, the CloudEvent, the Job rendered from the pool's template
(and the templates refused: a job's own jobTemplate, one the pool lacks, one below the pod floor), the Events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trawl.api.scrapejob import OnCompleteSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator.events import Transition
from trawl.operator.job.hookjob import JOB_TEMPLATE_REFUSED, job_name, plan, render_job
from trawl.operator.job.oncomplete import due, event, hook_events, settled

NOW = datetime(2026, 11, 26, 7, 0, tzinfo=UTC)
STATUS = {
    "phase": "Succeeded",
    "completionTime": "2026-11-26T06:59:00Z",
    "counts": {"total": 10, "succeeded": 9, "deadLettered": 1},
    "results": {"sink": "PostgreSQL", "location": "postgresql://u@db:5432/d table t", "count": 9},
}


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def test_due_backs_off_and_stops_when_done() -> None:
    assert due(None, NOW)
    assert not due({"state": "Succeeded"}, NOW) and not due({"state": "Failed"}, NOW)
    assert not due({"state": "Pending", "attempts": 3, "lastTry": ago(7)}, NOW)  # waits 2^3 s
    assert due({"state": "Pending", "attempts": 3, "lastTry": ago(8)}, NOW)
    assert not due({"state": "Running", "attempts": 1, "lastTry": ago(9)}, NOW)  # a running Job: every 10 s
    assert due({"state": "Running", "attempts": 1, "lastTry": ago(10)}, NOW)


def test_settled_only_for_the_hooks_asked() -> None:
    both = {"onComplete": {"webhook": {"url": "https://h.test/"}, "job": {"template": "load"}}}
    refused = {"onComplete": {"jobTemplate": {"spec": {}}}}  # settles too: its refusal is final
    assert not settled(None, refused) and settled({"job": {"state": "Failed"}}, refused)
    assert settled(None, {})
    assert not settled(None, both)
    assert not settled({"webhook": {"state": "Succeeded"}, "job": {"state": "Running"}}, both)
    assert settled({"webhook": {"state": "Failed"}, "job": {"state": "Succeeded"}}, both)
    assert settled({"webhook": {"state": "Succeeded"}}, {"onComplete": {"webhook": {"url": "https://h.test/"}}})


def test_cloud_event() -> None:
    ev = event("ns", "books", "uid-1", STATUS, NOW)
    assert ev["specversion"] == "1.0" and ev["type"] == "dev.trawl.scrapejob.finished"
    assert ev["source"] == "/apis/trawl.dev/v1alpha1/namespaces/ns/scrapejobs/books"
    assert ev["id"] == "uid-1/finished"  # stable: a receiver drops a repeated delivery
    assert ev["data"]["counts"] == STATUS["counts"] and ev["data"]["results"]["count"] == 9


def test_job_from_template_gets_the_environment_and_an_owner() -> None:
    template = {
        "metadata": {"labels": {"team": "data"}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "a", "image": "x", "env": [{"name": "TRAWL_JOB_NAME", "value": "stale"}]},
                        {"name": "b", "image": "y"},
                    ],
                    "initContainers": [{"name": "i", "image": "z"}],
                }
            }
        },
    }
    body = render_job(template, "ns", "books", "uid-1", STATUS, [{"name": "TRAWL_PARAM_TARGET", "value": "t1"}])
    assert body["metadata"]["name"] == "books-on-complete"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "trawl.dev/v1alpha1", "kind": "ScrapeJob", "name": "books", "uid": "uid-1"}
    ]
    assert body["metadata"]["labels"] == {"team": "data", "trawl.dev/scrapejob": "books"}
    pod = body["spec"]["template"]["spec"]
    for container in [*pod["containers"], *pod["initContainers"]]:
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TRAWL_JOB_NAME"] == "books"  # ours wins over the template's
        assert env["TRAWL_PARAM_TARGET"] == "t1"
        assert env["TRAWL_RESULTS_LOCATION"] == "postgresql://u@db:5432/d table t"
        assert (env["TRAWL_RESULTS_COUNT"], env["TRAWL_COUNT_DEAD_LETTERED"], env["TRAWL_JOB_PHASE"]) == (
            "9",
            "1",
            "Succeeded",
        )
    assert "env" not in template["spec"]["template"]["spec"]["containers"][1]  # the template is not changed
    assert len(job_name("x" * 63)) == 63


def test_a_hook_that_fails_for_good_is_one_warning_event() -> None:
    failed = {
        "webhook": {"state": "Failed", "message": "redirect refused: webhooks are POSTed to the URL given (HTTP 303)"}
    }
    assert hook_events({"webhook": {"state": "Pending"}}, failed) == [
        Transition(
            "Warning",
            "OnCompleteFailed",
            "onComplete.webhook: redirect refused: webhooks are POSTed to the URL given (HTTP 303)",
        )
    ]
    assert hook_events(failed, failed) == []  # once, not on every pass
    assert hook_events(None, {"webhook": {"state": "Succeeded"}, "job": {"state": "Running"}}) == []
    job_failed = hook_events(None, {"job": {"state": "Failed", "message": "Job x: Failed BackoffLimitExceeded"}})
    assert [e.message for e in job_failed] == ["onComplete.job: Job x: Failed BackoffLimitExceeded"]


LOADER: dict[str, Any] = {
    "metadata": {"labels": {"team": "data"}},
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "load", "image": "example/loader:1", "env": [{"name": "MODE", "value": "x"}]}],
            }
        }
    },
}


def _pool(**template: Any) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate(
        {"redis": {"url": "redis://r:6379/0"}, "onCompleteJobs": [{"name": "load", "template": template or LOADER}]}
    )


def _plan(on_complete: dict[str, Any], pool: ScrapePoolSpec) -> Any:
    spec = OnCompleteSpec.model_validate(on_complete)
    return plan(spec, pool, "shared", "ns", "books", "uid-1", STATUS, "trawl-operator")


def test_the_job_runs_the_pools_template_with_the_parameters_only() -> None:
    on_complete = {"job": {"template": "load", "parameters": [{"name": "TARGET", "value": "s3://b/x"}]}}
    body = _plan(on_complete, _pool())
    assert body["metadata"]["name"] == "books-on-complete" and body["metadata"]["namespace"] == "ns"
    assert body["metadata"]["labels"] == {"team": "data", "trawl.dev/scrapejob": "books"}
    container = body["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "example/loader:1"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["MODE"], env["TRAWL_PARAM_TARGET"], env["TRAWL_JOB_UID"]) == ("x", "s3://b/x", "uid-1")


def test_a_jobs_own_template_is_never_rendered() -> None:
    reason, message = _plan({"jobTemplate": LOADER}, _pool())
    assert reason == "JobTemplateNotAllowed" and message == JOB_TEMPLATE_REFUSED
    assert "onComplete.job" in message and "onCompleteJobs" in message


def test_a_template_the_pool_lacks() -> None:
    reason, message = _plan({"job": {"template": "embed"}}, _pool())
    assert reason == "TemplateNotFound"
    assert (
        message == "onComplete.job.template: ScrapePool shared has no onCompleteJobs template 'embed' (it offers: load)"
    )


@pytest.mark.parametrize(
    ("pod", "rule"),
    [
        ({"serviceAccountName": "trawl-operator"}, "serviceAccountName: trawl-operator is the operator's own"),
        ({"hostNetwork": True}, "hostNetwork: the host's namespaces are not allowed"),
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "volumes[root].hostPath"),
    ],
)
def test_a_pool_template_below_the_floor(pod: dict[str, Any], rule: str) -> None:
    template = {"spec": {"template": {"spec": {**LOADER["spec"]["template"]["spec"], **pod}}}}
    reason, message = _plan({"job": {"template": "load"}}, _pool(**template))
    assert reason == "PodNotAllowed"
    assert message.startswith("ScrapePool shared's onCompleteJobs template load breaks the operator's pod floor: ")
    assert rule in message


def test_a_hook_that_fails_posts_one_warning() -> None:
    failed = {"job": {"state": "Failed", "reason": "JobTemplateNotAllowed", "message": "m"}}
    assert [(e.type, e.reason, e.message) for e in hook_events(None, failed)] == [
        ("Warning", "JobTemplateNotAllowed", "onComplete.job: m")
    ]
    assert hook_events(failed, failed) == []  # once
    webhook = {"webhook": {"state": "Failed", "message": "HTTP 503"}}
    assert [e.reason for e in hook_events({"webhook": {"state": "Pending"}}, webhook)] == ["OnCompleteFailed"]
    assert hook_events(None, {"job": {"state": "Running"}, "webhook": {"state": "Succeeded"}}) == []
