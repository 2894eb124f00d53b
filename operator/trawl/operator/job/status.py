"""Pure derivation of a ScrapeJob's status from its queue counters.

No I/O: the reconciler gathers the facts (spec, Redis counters, what went wrong), this module
decides phase, counts, progress, ETA and conditions (through the builder in operator/conditions.py),
and says which transitions deserve an Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from trawl.api.common import format_time, parse_time
from trawl.operator.conditions import (
    Cond,
    ConditionType,
    Health,
    at_rest,
    get_condition,
    healthy,
    merge_conditions,
    progressing,
    redis_data_lost,
    stalled,
    warn_if_new,
)
from trawl.operator.events import Transition
from trawl.operator.problems import Problem
from trawl.queue.model import DeadLetterRecord, JobStats
from trawl.queue.notes import Skipped, Throttled

TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class JobFacts:
    generation: int
    suspend: bool
    stats: JobStats | None = None
    problem: Problem | None = None
    deadline_exceeded: bool = False
    max_dead_letters: int = 0
    enqueued: int | None = None
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)
    results: dict[str, Any] | None = None
    retry_handled: str | None = None
    epoch: str | None = None  # the pool's Redis data epoch this pass saw (see Queue.epoch)
    data_lost: str | None = None  # Redis lost the job's data: what that means for this job
    skipped: int = 0  # acked without a fetch (robots.txt disallows a discovered link): part of stats.succeeded
    skipped_sample: list[Skipped] = field(default_factory=list)
    truncated: int = 0  # records with an output format cut to its bounds (trawl.queue.notes)
    blocked: tuple[int, list[tuple[str, int]]] = (0, [])  # blocked responses, the most blocked domains
    archive: dict[str, int] | None = None  # spec.archive's WARC counts (trawl.queue.notes), when any
    throttled: list[Throttled] = field(default_factory=list)  # domains whose circuit breaker is open now
    tenant_throttled: str = ""  # the quota holding the job's tenant back, with its figure ("" when none is)
    tenant_queue_full: str = ""  # the URLs-queued quota stopping the tenant's seeds, with its figure
    # The tenant's browserSecondsPerDay holds the job (it renders): the quota's figure ("" when it does not)
    browser_quota: str = ""
    registered: tuple[int, str] | None = None  # (priority, tenant) this pass registered the job with
    politeness: dict[str, Any] | None = None  # what this pass registered the job's politeness as (its status)


def _ts(unix: float | None) -> str | None:
    return None if unix is None else format_time(datetime.fromtimestamp(unix, UTC))


def derive_phase(facts: JobFacts, previous_phase: str | None) -> str:
    stats = facts.stats
    if facts.deadline_exceeded:
        return "Failed"
    if stats is None or not stats.exists:
        # Nothing known from Redis right now (a problem, or retention removed the data): keep what
        # the job was, so an unreachable Redis never moves a running or finished job back to Pending.
        return previous_phase or "Pending"
    if stats.finished:
        return "Failed" if stats.dead > facts.max_dead_letters else "Succeeded"
    if facts.suspend:
        return "Suspended"
    if stats.first_claim_at is None and stats.succeeded == 0 and stats.dead == 0:
        return "Queued" if stats.total > 0 else "Pending"
    return "Running"


def derive_job_status(
    facts: JobFacts, previous: dict[str, Any] | None, now: datetime
) -> tuple[dict[str, Any], list[Transition]]:
    """The new ``status`` (wire form) and the transitions worth an Event."""
    prev = previous or {}
    phase = derive_phase(facts, prev.get("phase"))
    status: dict[str, Any] = {"observedGeneration": facts.generation, "phase": phase}
    epoch = facts.epoch or prev.get("queueEpoch")
    if epoch:
        status["queueEpoch"] = epoch
    _progress(status, facts, prev, phase, now)
    _findings(status, facts, prev, phase)
    known = facts.stats is not None and facts.stats.exists
    # Nothing from Redis now (retention, an outage, lost data): the counts the status kept are the record.
    dead = facts.stats.dead if facts.stats is not None and known else _count(status, "deadLettered")
    conds, status["message"] = _conditions(facts, phase, status, dead)
    status["conditions"] = merge_conditions(prev.get("conditions"), conds, generation=facts.generation, now=now)
    return status, _transitions(facts, prev, phase, status, dead)


def _count(status: Mapping[str, Any], key: str) -> int:
    return int((status.get("counts") or {}).get(key, 0))


def _progress(status: dict[str, Any], facts: JobFacts, prev: Mapping[str, Any], phase: str, now: datetime) -> None:
    """counts, progress, ETA, start and completion times, and the texts of the kubectl columns."""
    stats = facts.stats
    start_time = prev.get("startTime")
    completion_time = prev.get("completionTime") if phase in TERMINAL else None
    if stats is not None and stats.exists:
        status["counts"] = _counts(stats, facts.skipped)
        if facts.truncated:
            status["counts"]["truncated"] = facts.truncated
        if facts.blocked[0]:
            status["counts"]["blocked"] = facts.blocked[0]
        if facts.archive:
            status["archive"] = facts.archive
        if any(stats.changes) or stats.not_revisited:  # a refresh job's pages by label (spec.refresh)
            status["changes"] = dict(zip(("new", "changed", "unchanged", "gone"), stats.changes, strict=True))
            if stats.not_revisited:
                status["changes"]["notRevisited"] = stats.not_revisited
        if stats.bloom is not None:  # never silently: the filter and what it may have cost (spec.crawl.bloomFilter)
            status["dedupe"] = {
                "mode": "Bloom",
                "bytes": stats.bloom.bytes,
                "hashes": stats.bloom.hashes,
                "possiblySkipped": round(stats.possibly_skipped, 3),
            }
        done = stats.succeeded + stats.dead
        status["progress"] = int(100 * done / stats.total) if stats.total else 0
        if start_time is None and stats.first_claim_at is not None:
            start_time = _ts(stats.first_claim_at)
        if phase in TERMINAL and completion_time is None:
            # When it reached its terminal phase: the queue's finish time (the last ack *or* dead letter),
            # or now for a job that ends otherwise (deadline exceeded).
            completion_time = (_ts(stats.finished_at) if stats.finished else None) or format_time(now)
        _eta(status, stats, prev, phase, parse_time(start_time), now)
    elif "counts" in prev:
        status["counts"] = prev["counts"]
        for kept in ("changes", "dedupe"):
            if kept in prev:
                status[kept] = prev[kept]
        if "progress" in prev:
            status["progress"] = prev["progress"]
    if phase in TERMINAL and completion_time is None:
        completion_time = format_time(now)
    if start_time:
        status["startTime"] = start_time
    if completion_time:
        status["completionTime"] = completion_time
    # Derived for `kubectl get` columns, which cannot format: PROGRESS with its %, DURATION once finished.
    if "progress" in status:
        status["progressText"] = f"{status['progress']}%"
    started_at, completed_at = parse_time(start_time), parse_time(completion_time)
    if started_at is not None and completed_at is not None:
        status["duration"] = human_duration((completed_at - started_at).total_seconds())


def _counts(stats: JobStats, skipped_acks: int) -> dict[str, int]:
    skipped = min(skipped_acks, stats.succeeded)
    counts = {
        "total": stats.total,
        "pending": stats.pending,
        "inFlight": stats.in_flight,
        "succeeded": stats.succeeded - skipped,
        "retrying": stats.retrying,
        "deadLettered": stats.dead,
    }
    if skipped:
        counts["skipped"] = skipped
    if stats.dead_dropped:
        counts["deadLettersDropped"] = stats.dead_dropped
    if stats.from_sitemaps:
        counts["fromSitemaps"] = stats.from_sitemaps
    return counts


def _eta(
    status: dict[str, Any],
    stats: JobStats,
    prev: Mapping[str, Any],
    phase: str,
    started: datetime | None,
    now: datetime,
) -> None:
    if status["counts"] == prev.get("counts") and phase == prev.get("phase") and "eta" in prev:
        # Unchanged counters: keep the estimate, so an idle second writes nothing.
        status["eta"] = prev["eta"]
        return
    done = stats.succeeded + stats.dead
    remaining = stats.pending + stats.in_flight + stats.retrying
    if phase == "Running" and started is not None and done > 0 and remaining > 0:
        elapsed = max((now - started).total_seconds(), 1.0)
        status["eta"] = format_time(now + timedelta(seconds=remaining * elapsed / done))


def _findings(status: dict[str, Any], facts: JobFacts, prev: Mapping[str, Any], phase: str) -> None:
    """What the pass found beside the counters: seeds enqueued, throttled domains, skipped URLs, dead
    letters, results. A list read from Redis replaces the previous one; one not read keeps it."""
    if facts.enqueued is not None:
        status["enqueued"] = facts.enqueued
    elif "enqueued" in prev:
        status["enqueued"] = prev["enqueued"]
    if facts.throttled and phase not in TERMINAL:
        status["throttledDomains"] = [
            {"domain": t.domain[:253], "reason": t.reason[:512], "until": _ts(t.until)} for t in facts.throttled[:10]
        ]
    if facts.blocked[1]:
        status["blockedDomains"] = [{"domain": d[:253], "blocked": n} for d, n in facts.blocked[1][:10]]
    elif "blockedDomains" in prev:
        status["blockedDomains"] = prev["blockedDomains"]
    if facts.skipped_sample:
        status["skipped"] = [
            {"url": s.url[:2048], "reason": s.reason[:1024], "time": _ts(s.time)} for s in facts.skipped_sample[:10]
        ]
    elif "skipped" in prev:
        status["skipped"] = prev["skipped"]
    if facts.dead_letters:
        status["deadLetters"] = [
            {
                "url": d.url[:2048],
                "attempts": d.attempts,
                "errorClass": d.error_class,
                "lastError": d.message[:1024],
                "time": _ts(d.time),
            }
            for d in facts.dead_letters[:20]
        ]
    if facts.results is not None:
        status["results"] = facts.results
    elif "results" in prev:  # nothing read from Redis this pass: what the status said stays (never rewound)
        status["results"] = prev["results"]
    if facts.retry_handled is not None:
        status["retryDeadLettersHandled"] = facts.retry_handled
    # What the job was registered with (fixed in the queue then): said by the pass that registered it, kept.
    if facts.registered is not None:
        status["priority"] = facts.registered[0]
        if facts.registered[1]:
            status["tenant"] = facts.registered[1]
    else:
        status.update({key: prev[key] for key in ("priority", "tenant") if key in prev})
    if facts.politeness is not None:
        status["politeness"] = facts.politeness
    elif "politeness" in prev:
        status["politeness"] = prev["politeness"]


def _conditions(facts: JobFacts, phase: str, status: Mapping[str, Any], dead: int) -> tuple[list[Cond], str]:
    """The job's conditions and the status message (the one Ready carries)."""
    problem = facts.problem
    if phase == "Succeeded":
        msg = _succeeded_message(facts, status, dead)
        health = healthy("Succeeded", msg, settled="Succeeded", stalled_by=problem)
        outcome = [Cond(ConditionType.COMPLETE, True, "Succeeded", msg), Cond(ConditionType.FAILED, False, "Succeeded")]
    elif phase == "Failed":
        if facts.deadline_exceeded:
            reason, msg = "DeadlineExceeded", "the job ran longer than activeDeadlineSeconds"
        else:
            reason = "TasksDeadLettered"
            msg = f"{dead} URLs failed for good (more than the {facts.max_dead_letters} tolerated)"
        # kstatus (Flux) reads Stalled=True as "failed"; without it a failed job looks in progress forever.
        health = stalled(reason, msg)
        outcome = [Cond(ConditionType.COMPLETE, False, reason), Cond(ConditionType.FAILED, True, reason, msg)]
    else:
        reason, msg = problem if problem is not None else _under_way(facts, phase)
        health = stalled(reason, msg) if problem is not None else _waiting(phase, reason, msg)
        outcome = [Cond(ConditionType.COMPLETE, False, reason), Cond(ConditionType.FAILED, False, reason)]
    # Stalled first: the order a job's conditions have always had (another order is a rewrite of each).
    conds = [health.stalled, health.ready, health.reconciling, *outcome]
    conds.append(
        Cond(ConditionType.SUSPENDED, True, "Suspended", "spec.suspend is true")
        if facts.suspend and phase not in TERMINAL
        else Cond(ConditionType.SUSPENDED, False, "NotSuspended")
    )
    conds.append(
        Cond(
            ConditionType.DEAD_LETTERED, True, "TasksDeadLettered", f"{dead} URLs dead-lettered; see status.deadLetters"
        )
        if dead
        else Cond(ConditionType.DEAD_LETTERED, False, "NoDeadLetters")
    )
    if facts.data_lost is not None:
        conds.append(redis_data_lost(facts.data_lost))
    return conds, msg


def _waiting(phase: str, reason: str, message: str) -> Health:
    """A job neither finished nor stuck. Suspended is at rest by the user's request: nothing happens until
    someone resumes it, so GitOps tools must read it as settled (kstatus Current), not as a wait that never
    ends. Every other wait (Pending, Queued, Running; a tenant's quota holding its tasks back) ends without
    anyone acting, so it is work under way: Reconciling=True with its reason (kstatus InProgress)."""
    if phase == "Suspended":
        return at_rest(reason, message)
    return progressing(reason, message)


def _succeeded_message(facts: JobFacts, status: Mapping[str, Any], dead: int) -> str:
    stats = facts.stats
    total = stats.total if stats is not None and stats.exists else _count(status, "total")
    skipped = _count(status, "skipped")
    return (
        f"{total - dead - skipped} of {total} URLs scraped"
        + (f", {skipped} skipped (robots.txt)" if skipped else "")
        + (f", {dead} dead-lettered" if dead else "")
    )


def quota_held(facts: JobFacts) -> bool:
    """The job waits on its tenant's quota: the tenant is throttled, the job has tasks ready and none claimed.
    (A job with tasks in flight is running; one with nothing ready is waiting on something else.)"""
    stats = facts.stats
    return bool(facts.tenant_throttled) and stats is not None and stats.pending > 0 and stats.in_flight == 0


def seeds_held(facts: JobFacts) -> bool:
    """The job waits on its tenant's URLs-queued quota: seeds are left to enqueue, none of its tasks is
    ready or claimed, and the tenant's queue is full."""
    stats = facts.stats
    return (
        bool(facts.tenant_queue_full)
        and stats is not None
        and not stats.enqueue_done
        and stats.pending == 0
        and stats.in_flight == 0
    )


def _under_way(facts: JobFacts, phase: str) -> tuple[str, str]:
    """(reason, message) of a job that is neither finished nor stuck."""
    if phase == "Suspended":
        return "Suspended", "the job is suspended: workers claim none of its tasks"
    if phase in ("Pending", "Queued", "Running") and facts.browser_quota:
        # Held in the queue by the operator until the day's browser time is reset: waiting by design, as below.
        return (
            "QuotaExceeded",
            f"its tenant is over a quota of its pool ({facts.browser_quota}): its browser tasks wait until 00:00 UTC",
        )
    if phase in ("Pending", "Queued", "Running") and seeds_held(facts):
        return (
            "QuotaExceeded",
            f"its tenant has as many URLs queued as its pool allows ({facts.tenant_queue_full}): its seeds wait",
        )
    if phase in ("Queued", "Running") and quota_held(facts):
        # Waiting by design, not stuck: it proceeds without anyone acting, so Reconciling=True (kstatus:
        # InProgress) with this reason, never Stalled.
        return "QuotaExceeded", f"its tenant is over a quota of its pool ({facts.tenant_throttled}): its tasks wait"
    if phase == "Queued":
        return "Queued", "tasks are queued, waiting for a worker"
    if phase == "Running":
        msg = "workers are processing the job"
        if facts.throttled:
            t = facts.throttled[0]
            more = f" and {len(facts.throttled) - 1} more" if len(facts.throttled) > 1 else ""
            msg += f"; circuit breaker open for {t.domain}{more} ({t.reason}): its tasks wait"
        return "Running", msg
    return "Pending", "the job is being prepared"


def _transitions(
    facts: JobFacts, prev: Mapping[str, Any], phase: str, status: Mapping[str, Any], dead: int
) -> list[Transition]:
    events: list[Transition] = []
    if facts.data_lost is not None:
        events.append(Transition("Warning", "DataLost", facts.data_lost))
    prev_phase = prev.get("phase")
    prev_stalled = get_condition(prev.get("conditions"), ConditionType.STALLED)
    first_pass = prev_phase is None and prev_stalled is None
    was_stuck = prev_stalled is not None and prev_stalled.get("status") == "True" and prev_phase not in TERMINAL
    if facts.problem is None and (first_pass or was_stuck):
        events.append(Transition("Normal", "Accepted", "spec is valid; the job is handed to its pool"))
    if phase != prev_phase:
        events += _phase_transition(phase, status, facts.stats)
    prev_dead = _count(prev, "deadLettered")
    if dead > prev_dead:
        events.append(
            Transition("Warning", "DeadLettered", f"{dead - prev_dead} more URLs dead-lettered ({dead} in all)")
        )
    if facts.problem is not None:
        events += warn_if_new(prev.get("conditions"), ConditionType.STALLED, *facts.problem)
    return events


def _phase_transition(phase: str, status: Mapping[str, Any], stats: JobStats | None) -> list[Transition]:
    if phase == "Succeeded":
        return [Transition("Normal", "Completed", status["message"])]
    if phase == "Failed":
        return [Transition("Warning", "Failed", status["message"])]
    if phase == "Queued":
        return [Transition("Normal", "Enqueued", f"{stats.total if stats is not None else 0} tasks enqueued")]
    if phase == "Suspended":
        return [Transition("Normal", "Suspended", "job suspended")]
    return []


def status_changed(current: Mapping[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether writing ``new`` would change anything the API server stores (a field it drops counts)."""
    return dict(current or {}) != new


def human_duration(seconds: float) -> str:
    """kubectl's style: 45s, 2m13s, 1h5m, 3d4h (two units at most)."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"
