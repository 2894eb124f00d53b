"""What Flux reads of every state the status builders derive, computed by kstatus itself (hack/kstatus, the
cli-utils library Flux's health checks call), not by a copy of its rules: the table in docs/architecture.md
("What GitOps tools read"). tests/cluster/test_kstatus.py checks the same on live objects."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kstatus_tool import kstatus
from trawl.operator.conditions import Cond, at_rest, healthy, merge_conditions, progressing, stalled
from trawl.operator.job.status import JobFacts, derive_job_status
from trawl.operator.pool.status import finish_pass, pass_status
from trawl.operator.problems import Problem
from trawl.queue.model import JobStats

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _stats(**kw: Any) -> JobStats:
    base: dict[str, Any] = dict(
        total=10, pending=5, in_flight=1, retrying=0, succeeded=4, dead=0, enqueue_done=True, suspended=False,
        first_claim_at=1.0,
    )  # fmt: skip
    base.update(kw)
    return JobStats(**base)


# Each state a job's status derivation reaches: (facts, phase, kstatus, the reason Flux shows).
JOB_STATES: dict[str, tuple[JobFacts, str, str, str | None]] = {
    "pending": (JobFacts(generation=1, suspend=False), "Pending", "InProgress", "Pending"),
    "queued": (
        JobFacts(generation=1, suspend=False, stats=_stats(pending=10, in_flight=0, succeeded=0, first_claim_at=None)),
        "Queued",
        "InProgress",
        "Queued",
    ),
    "running": (JobFacts(generation=1, suspend=False, stats=_stats()), "Running", "InProgress", "Running"),
    "succeeded": (
        JobFacts(generation=1, suspend=False, stats=_stats(pending=0, in_flight=0, succeeded=10)),
        "Succeeded",
        "Current",
        None,
    ),
    "failed": (
        JobFacts(generation=1, suspend=False, stats=_stats(pending=0, in_flight=0, succeeded=7, dead=3)),
        "Failed",
        "Failed",
        "TasksDeadLettered",
    ),
    "deadline-exceeded": (
        JobFacts(generation=1, suspend=False, deadline_exceeded=True, stats=_stats()),
        "Failed",
        "Failed",
        "DeadlineExceeded",
    ),
    "stalled": (
        JobFacts(generation=1, suspend=False, problem=Problem("InvalidSpec", "spec.urls: at least 1 item")),
        "Pending",
        "Failed",
        "InvalidSpec",
    ),
    # At rest by the user's request: Current, however long it stays suspended.
    "suspended": (
        JobFacts(generation=1, suspend=True, stats=_stats(suspended=True)),
        "Suspended",
        "Current",
        None,
    ),
    "suspended-before-a-claim": (
        JobFacts(generation=1, suspend=True, stats=_stats(suspended=True, succeeded=0, first_claim_at=None)),
        "Suspended",
        "Current",
        None,
    ),
    # A suspended job whose Redis cannot be reached: the operator cannot hold it, and says so.
    "suspended-unreachable": (
        JobFacts(generation=1, suspend=True, stats=_stats(suspended=True), problem=Problem("RedisUnavailable", "x")),
        "Suspended",
        "Failed",
        "RedisUnavailable",
    ),
}


def _obj(kind: str, status: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "ns", "generation": generation},
        "spec": {},
        "status": status,
    }


def _reason(status: dict[str, Any], type_: str) -> str:
    return next(c["reason"] for c in status["conditions"] if c["type"] == type_)


@pytest.mark.parametrize("case", sorted(JOB_STATES))
def test_each_job_state_reads_as_documented(case: str) -> None:
    facts, phase, expected, reason = JOB_STATES[case]
    status, _ = derive_job_status(facts, None, NOW)
    assert status["phase"] == phase
    got = kstatus(_obj("ScrapeJob", status))["ScrapeJob/x"]
    assert got.status == expected, (got, status["conditions"])
    if expected == "InProgress":
        assert _reason(status, "Reconciling") == reason
    elif expected == "Failed":
        assert _reason(status, "Stalled") == reason
    # A spec edit not yet observed is InProgress whatever the status says (kstatus's generation check).
    assert kstatus(_obj("ScrapeJob", status, generation=2))["ScrapeJob/x"].status == "InProgress"


def test_a_job_held_by_its_tenants_quota_is_in_progress() -> None:
    """QuotaExceeded (issue 33): the job waits for its tenant's quota, which frees itself (tasks finish, the rate
    window moves, the day turns), so it is work under way: InProgress with the reason, never Current or Failed.

    The job's status derivation does not produce this reason yet (the quota's side of issue 33 adds it): the
    conditions are built here as that code must build them, with ``progressing``. Once JobFacts carries the
    quota hold, derive the status from facts like the cases above."""
    queued, _ = derive_job_status(JOB_STATES["queued"][0], None, NOW)
    held = progressing("QuotaExceeded", "tenant team-a: 12/12 in flight")
    queued["conditions"] = merge_conditions(queued["conditions"], list(held), generation=1, now=NOW)
    got = kstatus(_obj("ScrapeJob", queued))["ScrapeJob/x"]
    assert got == ("InProgress", "tenant team-a: 12/12 in flight")


def _conds(*conds: Cond) -> dict[str, Any]:
    return {"observedGeneration": 1, "conditions": merge_conditions(None, list(conds), generation=1, now=NOW)}


def test_cron_states() -> None:
    """As the cron reconciler builds them: a suspended schedule is at rest (Current) like a running one."""
    got = kstatus(
        {**_obj("CronScrapeJob", _conds(*healthy("Scheduled", "1 active jobs"))), "metadata": {"name": "on"}},
        {**_obj("CronScrapeJob", _conds(*at_rest("Suspended", "suspended"))), "metadata": {"name": "off"}},
        {**_obj("CronScrapeJob", _conds(*stalled("InvalidSchedule", "bad"))), "metadata": {"name": "bad"}},
    )
    assert {k: v.status for k, v in got.items()} == {
        "CronScrapeJob/on": "Current",
        "CronScrapeJob/off": "Current",
        "CronScrapeJob/bad": "Failed",
    }


@pytest.mark.parametrize(
    ("desired", "ready", "problem", "expected"),
    [
        (0, 0, None, "Current"),  # scaled to zero with no work: at rest
        (2, 2, None, "Current"),
        (3, 1, None, "InProgress"),  # scaling: workers serve, more are starting (Reconciling=True, Scaling)
        (2, 2, Problem("RedisUnavailable", "connection refused"), "Failed"),
    ],
)
def test_pool_states(desired: int, ready: int, problem: Problem | None, expected: str) -> None:
    new = {**pass_status("p", 1), "desiredReplicas": desired, "readyReplicas": ready}
    outcome = finish_pass(new, {}, 1, NOW, [], problem=problem, idle=desired == 0)
    assert kstatus(_obj("ScrapePool", outcome.status))["ScrapePool/x"].status == expected
