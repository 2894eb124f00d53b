"""Every problem is a status: the pure pieces that turn errors and hostile specs into conditions."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client import ApiException
from pydantic import ValidationError

from trawl.api.cronscrapejob import CronScrapeJobSpec
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator.cron.reconcile import reconcile_cron
from trawl.operator.indexes import controller_uid, pool_index_entry
from trawl.operator.pool.fieldowners import take_over
from trawl.operator.pool.status import failed_pool
from trawl.operator.problems import classify_error

NOW = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)
JOB = {"pool": "p", "urls": ["http://127.0.0.1/"]}


@pytest.mark.parametrize("url", ["redis://[::1", "redis://h:port/0", "redis://h:99999", "redis://:6379"])
def test_pool_redis_url_that_redis_py_cannot_use_is_rejected_on_acceptance(url: str) -> None:
    with pytest.raises(ValidationError, match="not a valid Redis URL"):
        ScrapePoolSpec.model_validate({"redis": {"url": url}})


def test_pool_worker_fields_the_api_server_would_reject() -> None:
    base: dict[str, Any] = {"redis": {"url": "redis://127.0.0.1:6379"}}
    for worker, match in [
        ({"tolerations": [{"key": "a", "operator": "Sometimes"}]}, "operator"),
        ({"tolerations": [{"keey": "a"}]}, "keey"),
        ({"resources": {"limits": {"cpu": "lots"}}}, "cpu"),
        ({"nodeSelector": {"bad key!": "x"}}, "not a valid label key"),
        ({"podAnnotations": {"-x/y": "1"}}, "not a valid label key"),
    ]:
        with pytest.raises(ValidationError, match=match):
            ScrapePoolSpec.model_validate({**base, "worker": worker})
    ok = ScrapePoolSpec.model_validate(
        {
            **base,
            "worker": {
                "resources": {"limits": {"cpu": "500m", "memory": "1.5Gi"}},
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
    )
    assert ok.worker.tolerations is not None and ok.worker.tolerations[0].effect == "NoSchedule"


def test_job_url_whose_host_does_not_parse_is_rejected_and_never_breaks_the_index() -> None:
    with pytest.raises(ValidationError, match="Invalid IPv6 URL"):
        ScrapeJobSpec.model_validate({"pool": "p", "urls": ["http://[::1/x"]})
    entry = pool_index_entry("j", {"pool": "p", "urls": ["http://[::1/x", "http://a.example/"]}, {})
    assert entry["name"] == "j" and entry["hosts"] == ["a.example"]
    # Garbage anywhere in the raw object still yields an entry.
    entry = pool_index_entry("j", {"urls": [7], "urlRanges": ["x"], "politeness": 3}, {"counts": {"pending": "x"}})
    assert entry["waiting"] == 0 and entry["politeness"] is None


def test_controller_uid() -> None:
    meta = {"ownerReferences": [{"uid": "a"}, {"uid": "b", "controller": True}]}
    assert controller_uid(meta) == "b"
    assert controller_uid({}) is None


def test_cron_that_never_fires_is_rejected_on_acceptance() -> None:
    with pytest.raises(ValidationError, match="never fires"):
        CronScrapeJobSpec.model_validate({"schedule": "0 0 30 2 *", "jobTemplate": {"spec": JOB}})
    assert CronScrapeJobSpec.model_validate({"schedule": "0 0 29 2 *", "jobTemplate": {"spec": JOB}})


def _cron(pool_index: dict[Any, Any], jobs: list[dict[str, Any]], status: dict[str, Any] | None = None) -> Any:
    return asyncio.run(
        reconcile_cron(
            name="c",
            namespace="ns",
            uid="cron-uid",
            generation=3,
            created="2026-11-26T05:00:00Z",
            spec_raw={"schedule": "*/5 * * * *", "jobTemplate": {"spec": JOB}},
            status=status or {},
            jobs=jobs,
            now=NOW,
            pool_index=pool_index,
        )
    )


def test_cron_whose_pool_is_missing_is_stalled_once_and_creates_nothing() -> None:
    first = _cron({}, [])
    stalled = next(c for c in first.status["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "PoolNotFound"
    assert "ns/p does not exist" in stalled["message"]
    assert first.status["observedGeneration"] == 3
    assert [e.reason for e in first.events] == ["PoolNotFound"]
    assert "lastScheduleTime" not in first.status  # nothing was created (no API client is configured here)
    again = _cron({}, [], first.status)
    assert again.events == []  # one Warning per new reason


def test_unexpected_errors_become_a_reason_and_the_servers_message() -> None:
    exc = ApiException(status=422, reason="Unprocessable Entity")
    exc.body = json.dumps({"message": 'Deployment.apps "x" is invalid: spec.template...', "reason": "Invalid"})
    reason, msg = classify_error(exc)
    assert reason == "APIRejected" and 'Deployment.apps "x" is invalid' in msg and "422" in msg
    assert classify_error(ApiException(status=503))[0] == "APIUnavailable"
    assert classify_error(KeyError("x"))[0] == "InternalError"
    outcome = failed_pool("p", {}, 4, NOW, "APIRejected", msg)
    conds = {c["type"]: c for c in outcome.status["conditions"]}
    assert conds["Stalled"]["status"] == "True" and conds["Ready"]["status"] == "False"
    assert outcome.status["observedGeneration"] == 4 and [e.reason for e in outcome.events] == ["APIRejected"]


def _entry(manager: str, operation: str, fields: dict[str, Any], sub: str | None = None) -> dict[str, Any]:
    entry = {"manager": manager, "operation": operation, "apiVersion": "apps/v1", "fieldsType": "FieldsV1"}
    entry["fieldsV1"] = fields
    if sub:
        entry["subresource"] = sub
    return entry


PORT_9090 = {'k:{"containerPort":9090,"protocol":"TCP"}': {".": {}, "f:name": {}}}


def test_take_over_merges_a_plain_creates_spec_but_leaves_replicas_metadata_and_subresources() -> None:
    created = _entry(
        "trawl-autoscaler",
        "Update",
        {
            "f:metadata": {"f:labels": {"f:a": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:ports": PORT_9090}}},
        },
    )
    ours = _entry("trawl-operator", "Apply", {"f:spec": {"f:template": {"f:metadata": {"f:labels": {}}}}})
    status = _entry("kube-controller-manager", "Update", {"f:status": {"f:replicas": {}}}, sub="status")
    revision = _entry("kube-controller-manager", "Update", {"f:metadata": {"f:annotations": {"f:rev": {}}}})
    new = take_over([created, ours, status, revision], "trawl-operator", "apps/v1", "t")
    assert new is not None
    mine = next(e for e in new if e["manager"] == "trawl-operator")
    assert mine["operation"] == "Apply" and mine["time"] == "t"
    assert "f:metadata" not in mine["fieldsV1"]
    assert mine["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:ports"] == PORT_9090
    assert mine["fieldsV1"]["f:spec"]["f:template"]["f:metadata"] == {"f:labels": {}}
    assert "f:replicas" not in mine["fieldsV1"]["f:spec"]
    scaler = next(e for e in new if e["manager"] == "trawl-autoscaler")
    assert scaler["fieldsV1"] == {"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:replicas": {}}}
    assert status in new and revision in new
    # Afterwards there is nothing left to take over.
    assert take_over(new, "trawl-operator", "apps/v1", "t") is None


def test_take_over_from_another_manager_without_our_entry() -> None:
    other = _entry("kubectl-edit", "Update", {"f:spec": {"f:replicas": {}, "f:paused": {}}})
    new = take_over([other], "trawl-operator", "apps/v1", "t")
    assert new == [
        {
            "manager": "trawl-operator",
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1",
            "time": "t",
            "fieldsV1": {"f:spec": {"f:paused": {}}},
        },
        {**other, "fieldsV1": {"f:spec": {"f:replicas": {}}}},
    ]
    # Only replicas or metadata: nothing to take.
    assert take_over([_entry("x", "Update", {"f:spec": {"f:replicas": {}}})], "trawl-operator", "v", "t") is None


def test_history_limits_and_replace_touch_only_jobs_the_cron_controls() -> None:
    # A finished job and an active one carry the cron's label but another controller: with limits of
    # zero and Replace they would be deleted (and, with no API client configured here, raise).
    foreign = [
        {"name": "c-1", "phase": "Succeeded", "completionTime": "2026-11-26T05:00:00Z", "owner": "someone-else"},
        {"name": "c-2", "phase": "Failed", "completionTime": "2026-11-26T05:01:00Z", "owner": None},
        {"name": "c-3", "phase": "Running", "owner": "someone-else"},
    ]
    spec = {
        "schedule": "*/5 * * * *",
        "suspend": True,
        "concurrencyPolicy": "Replace",
        "successfulJobsHistoryLimit": 0,
        "failedJobsHistoryLimit": 0,
        "jobTemplate": {"spec": JOB},
    }
    outcome = asyncio.run(
        reconcile_cron(
            name="c",
            namespace="ns",
            uid="cron-uid",
            generation=1,
            created="2026-11-26T05:00:00Z",
            spec_raw=spec,
            status={},
            jobs=foreign,
            now=NOW,
            pool_index={("ns", "p"): [{"spec": {"redis": {"url": "redis://127.0.0.1:6379"}}, "uid": "u"}]},
        )
    )
    assert not [e for e in outcome.events if e.reason == "SuccessfulDelete"]
    assert outcome.status["active"] == []
