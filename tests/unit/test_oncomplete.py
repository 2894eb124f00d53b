"""spec.onComplete decisions: when a hook acts again, the CloudEvent, the Job rendered from the template."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trawl.operator.events import Transition
from trawl.operator.job.oncomplete import due, event, hook_events, job_name, render_job, settled

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
    both = {"onComplete": {"webhook": {"url": "https://h.test/"}, "jobTemplate": {"spec": {}}}}
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
    body = render_job(template, "ns", "books", "uid-1", STATUS)
    assert body["metadata"]["name"] == "books-on-complete"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "trawl.dev/v1alpha1", "kind": "ScrapeJob", "name": "books", "uid": "uid-1"}
    ]
    assert body["metadata"]["labels"] == {"team": "data", "trawl.dev/scrapejob": "books"}
    pod = body["spec"]["template"]["spec"]
    for container in [*pod["containers"], *pod["initContainers"]]:
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TRAWL_JOB_NAME"] == "books"  # ours wins over the template's
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
    assert [e.message for e in job_failed] == ["onComplete.jobTemplate: Job x: Failed BackoffLimitExceeded"]
