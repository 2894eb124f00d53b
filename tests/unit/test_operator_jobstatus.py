"""ScrapeJob status derivation: phases, counts, conditions and transition events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trawl.api.scrapejob import ScrapeJobStatus
from trawl.operator.conditions import get_condition, is_true
from trawl.operator.job.status import JobFacts, derive_job_status, status_changed
from trawl.operator.problems import Problem
from trawl.queue.model import DeadLetterRecord, JobStats
from trawl.queue.notes import Skipped, Throttled

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def stats(**kw: object) -> JobStats:
    base: dict[str, object] = dict(
        total=10,
        pending=10,
        in_flight=0,
        retrying=0,
        succeeded=0,
        dead=0,
        enqueue_done=True,
        suspended=False,
        first_claim_at=None,
    )
    base.update(kw)
    return JobStats(**base)  # type: ignore[arg-type]


def test_queued_job_is_reconciling_not_ready() -> None:
    status, events = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats()), None, NOW)
    assert status["phase"] == "Queued"
    assert status["observedGeneration"] == 1
    assert is_true(status["conditions"], "Reconciling")
    assert not is_true(status["conditions"], "Ready")
    assert [e.reason for e in events] == ["Accepted", "Enqueued"]


def test_running_job_counts_progress_and_eta() -> None:
    t = NOW.timestamp() - 10
    s = stats(pending=4, in_flight=1, succeeded=5, first_claim_at=t)
    status, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=s), {"phase": "Queued"}, NOW)
    assert status["phase"] == "Running"
    assert status["progress"] == 50
    assert status["counts"] == {
        "total": 10,
        "pending": 4,
        "inFlight": 1,
        "succeeded": 5,
        "retrying": 0,
        "deadLettered": 0,
    }
    # 5 done in 10 s, 5 left: about 10 s more.
    assert status["eta"] == (NOW + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_finished_job_is_complete_and_ready() -> None:
    s = stats(
        pending=0,
        succeeded=10,
        first_claim_at=NOW.timestamp() - 5,
        finished_at=NOW.timestamp() - 1,
    )
    status, events = derive_job_status(JobFacts(generation=2, suspend=False, stats=s), {"phase": "Running"}, NOW)
    assert status["phase"] == "Succeeded"
    for cond in ("Complete", "Ready"):
        assert is_true(status["conditions"], cond)
    assert not is_true(status["conditions"], "Reconciling")
    assert status["completionTime"] == (NOW - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [e.reason for e in events] == ["Completed"]


def test_dead_letters_fail_the_job_beyond_tolerance() -> None:
    s = stats(pending=0, succeeded=8, dead=2, first_claim_at=NOW.timestamp() - 5)
    dl = [DeadLetterRecord("t1", "http://x/1", 3, "HTTP5xx", "503", NOW.timestamp(), [])]
    status, events = derive_job_status(
        JobFacts(generation=1, suspend=False, stats=s, dead_letters=dl), {"phase": "Running"}, NOW
    )
    assert status["phase"] == "Failed"
    assert is_true(status["conditions"], "Failed")
    assert is_true(status["conditions"], "DeadLettered")
    assert is_true(status["conditions"], "Stalled")  # kstatus/Flux read a failed job as failed, not in progress
    assert status["deadLetters"][0]["url"] == "http://x/1"
    assert {e.reason for e in events} == {"Failed", "DeadLettered"}


def test_tolerated_dead_letters_still_succeed() -> None:
    s = stats(pending=0, succeeded=8, dead=2, first_claim_at=NOW.timestamp() - 5)
    status, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=s, max_dead_letters=2), None, NOW)
    assert status["phase"] == "Succeeded"
    assert is_true(status["conditions"], "DeadLettered")


def test_requeued_dead_letters_reopen_the_job() -> None:
    failed, _ = derive_job_status(
        JobFacts(generation=1, suspend=False, stats=stats(pending=0, succeeded=8, dead=2, first_claim_at=1.0)),
        None,
        NOW,
    )
    reopened, _ = derive_job_status(
        JobFacts(generation=1, suspend=False, stats=stats(pending=2, succeeded=8, dead=0, first_claim_at=1.0)),
        failed,
        NOW,
    )
    assert reopened["phase"] == "Running"
    assert "completionTime" not in reopened
    assert not is_true(reopened["conditions"], "Failed")


def test_problem_stalls_with_event_once() -> None:
    facts = JobFacts(generation=1, suspend=False, problem=Problem("PoolNotFound", "ScrapePool x does not exist"))
    status, events = derive_job_status(facts, None, NOW)
    assert is_true(status["conditions"], "Stalled")
    assert "Accepted" not in [e.reason for e in events]
    assert get_condition(status["conditions"], "Stalled")["reason"] == "PoolNotFound"  # type: ignore[index]
    assert [e.reason for e in events] == ["PoolNotFound"]
    again, events2 = derive_job_status(facts, status, NOW + timedelta(seconds=5))
    assert events2 == []
    assert not status_changed(status, again)


def test_suspended_job() -> None:
    status, _ = derive_job_status(JobFacts(generation=3, suspend=True, stats=stats(first_claim_at=1.0)), None, NOW)
    assert status["phase"] == "Suspended"
    assert is_true(status["conditions"], "Suspended")
    # At rest by the user's request: nothing in progress (GitOps tools read it as settled), never Complete.
    assert not is_true(status["conditions"], "Reconciling")
    assert not is_true(status["conditions"], "Stalled")
    assert not is_true(status["conditions"], "Complete")
    ready = get_condition(status["conditions"], "Ready")
    assert ready is not None and ready["status"] == "True" and ready["reason"] == "Suspended"
    assert get_condition(status["conditions"], "Reconciling")["reason"] == "Suspended"  # type: ignore[index]


def test_a_suspended_job_that_cannot_be_reached_is_stalled() -> None:
    facts = JobFacts(
        generation=3, suspend=True, stats=stats(first_claim_at=1.0), problem=Problem("RedisUnavailable", "x")
    )
    status, _ = derive_job_status(facts, None, NOW)
    assert is_true(status["conditions"], "Stalled")
    assert not is_true(status["conditions"], "Ready")


def test_deadline_exceeded_fails() -> None:
    facts = JobFacts(generation=1, suspend=False, stats=stats(first_claim_at=1.0), deadline_exceeded=True)
    status, _ = derive_job_status(facts, None, NOW)
    assert status["phase"] == "Failed"
    assert get_condition(status["conditions"], "Failed")["reason"] == "DeadlineExceeded"  # type: ignore[index]


def test_transition_time_kept_while_status_unchanged() -> None:
    first, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats()), None, NOW)
    later, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats()), first, NOW + timedelta(hours=1))
    assert get_condition(first["conditions"], "Reconciling") == get_condition(later["conditions"], "Reconciling")
    assert not status_changed(first, later)


def test_unchanged_counts_keep_eta() -> None:
    s = stats(pending=4, in_flight=1, succeeded=5, first_claim_at=NOW.timestamp() - 10)
    first, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=s), {"phase": "Running"}, NOW)
    second, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=s), first, NOW + timedelta(seconds=3))
    assert not status_changed(first, second)


def test_skipped_links_are_counted_apart_and_do_not_fail_the_job() -> None:
    s = stats(pending=0, succeeded=10, first_claim_at=NOW.timestamp() - 5)
    sample = [Skipped("http://x/private/a", "robots.txt disallows http://x/private/a", NOW.timestamp())]
    facts = JobFacts(generation=1, suspend=False, stats=s, skipped=2, skipped_sample=sample)
    status, _ = derive_job_status(facts, {"phase": "Running"}, NOW)
    assert status["phase"] == "Succeeded"
    assert status["counts"]["succeeded"] == 8 and status["counts"]["skipped"] == 2
    assert status["skipped"] == [
        {"url": "http://x/private/a", "reason": "robots.txt disallows http://x/private/a", "time": _ts(NOW)}
    ]
    assert status["message"] == "8 of 10 URLs scraped, 2 skipped (robots.txt)"
    ScrapeJobStatus.model_validate(status)  # the CRD's schema accepts it


def test_a_failing_sink_stalls_the_running_job_with_its_error() -> None:
    s = stats(pending=5, in_flight=5, first_claim_at=NOW.timestamp() - 5)
    problem = Problem("SinkFailing", "the job's sink is failing: webhook http://h/ failed: HTTP 400")
    status, events = derive_job_status(
        JobFacts(generation=1, suspend=False, stats=s, problem=problem), {"phase": "Running"}, NOW
    )
    stalled = get_condition(status["conditions"], "Stalled")
    assert stalled is not None and stalled["status"] == "True" and stalled["reason"] == "SinkFailing"
    assert status["message"] == problem.message
    assert [e.reason for e in events] == ["SinkFailing"]


def test_open_circuit_breakers_are_listed_while_the_job_runs() -> None:
    s = stats(pending=5, in_flight=1, succeeded=4, first_claim_at=NOW.timestamp() - 5)
    t = Throttled("shop.example:443", "HTTP5xx: HTTP 503 from https://shop.example/x", NOW.timestamp() + 30)
    status, _ = derive_job_status(
        JobFacts(generation=1, suspend=False, stats=s, throttled=[t]), {"phase": "Running"}, NOW
    )
    assert status["throttledDomains"] == [
        {"domain": "shop.example:443", "reason": t.reason, "until": _ts(NOW + timedelta(seconds=30))}
    ]
    assert "circuit breaker open for shop.example:443" in status["message"]
    ScrapeJobStatus.model_validate(status)


def test_data_lost_on_a_finished_job_keeps_its_status_and_is_told_once() -> None:
    s = stats(pending=0, succeeded=10, first_claim_at=NOW.timestamp() - 5, finished_at=NOW.timestamp() - 1)
    done, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=s, epoch="e1"), {"phase": "Running"}, NOW)
    assert done["queueEpoch"] == "e1"
    lost = JobFacts(generation=1, suspend=False, stats=None, epoch="e2", data_lost="the pool's Redis lost it")
    after, events = derive_job_status(lost, done, NOW)
    assert after["phase"] == "Succeeded" and after["counts"] == done["counts"]
    assert after["message"] == done["message"]  # not rewritten from the missing counters
    assert is_true(after["conditions"], "DataLost") and after["queueEpoch"] == "e2"
    assert [e.reason for e in events] == ["DataLost"]
    again, events = derive_job_status(JobFacts(generation=1, suspend=False, stats=None, epoch="e2"), after, NOW)
    assert is_true(again["conditions"], "DataLost") and events == []  # sticky, told once


def test_records_with_a_cut_output_format_are_counted() -> None:
    s = stats(pending=0, succeeded=10, first_claim_at=NOW.timestamp() - 5)
    facts = JobFacts(generation=1, suspend=False, stats=s, truncated=3)
    status, _ = derive_job_status(facts, {"phase": "Running"}, NOW)
    assert status["phase"] == "Succeeded" and status["counts"]["truncated"] == 3
    ScrapeJobStatus.model_validate(status)  # the CRD's schema accepts it
    status, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=s), {"phase": "Running"}, NOW)
    assert "truncated" not in status["counts"]
