"""CronScrapeJob reconciliation: create, replace and clean up ScrapeJobs on schedule."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from croniter import CroniterBadCronError, CroniterBadDateError
from pydantic import ValidationError

from trawl.api.common import format_time, parse_time, validation_message
from trawl.api.cronscrapejob import CronScrapeJobSpec
from trawl.api.naming import ANNOTATION_SCHEDULED_AT, API_VERSION, GROUP, LABEL_CRON, VERSION
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.jobspec.tenancy import pool_namespace, sharing_refusal
from trawl.operator import kube
from trawl.operator.conditions import ConditionType, at_rest, healthy, merge_conditions, stalled, warn_if_new
from trawl.operator.events import Transition
from trawl.operator.indexes import namespace_labels, pool_from_index
from trawl.operator.job.reconcile import delete_job_object
from trawl.operator.job.status import TERMINAL
from trawl.operator.problems import Problem
from trawl.operator.sharding import inherited_labels

from .schedule import decide, history_to_delete, job_name

log = logging.getLogger(__name__)


@dataclass
class CronOutcome:
    status: dict[str, Any]
    events: list[Transition] = field(default_factory=list)


def build_job(
    cron_name: str,
    cron_uid: str,
    spec: CronScrapeJobSpec,
    scheduled: datetime,
    last_run: datetime | None = None,
    shard_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ScrapeJob of one run. ``last_run``: when the cron's last successful run started, which a template
    with ``sitemaps.lastmodSinceLastRun`` turns into the job's ``sitemaps.lastmodAfter``."""
    template = spec.job_template
    meta = template.metadata
    # The cron's shard label wins over the template's: its runs stay with the shard that creates them.
    labels = {**(meta.labels if meta and meta.labels else {}), **(shard_labels or {}), LABEL_CRON: cron_name}
    annotations = {
        **(meta.annotations if meta and meta.annotations else {}),
        ANNOTATION_SCHEDULED_AT: format_time(scheduled),
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ScrapeJob",
        "metadata": {
            "name": job_name(cron_name, scheduled),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "CronScrapeJob",
                    "name": cron_name,
                    "uid": cron_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": _since_last_run(template.spec.model_dump(mode="json", by_alias=True, exclude_unset=True), last_run),
    }


def _since_last_run(job_spec: dict[str, Any], last_run: datetime | None) -> dict[str, Any]:
    """The job's spec with ``sitemaps.lastmodAfter`` at the last successful run's start, when the template
    asks for it (``lastmodSinceLastRun``) and that is later than its own lastmodAfter."""
    sitemaps = job_spec.get("sitemaps")
    if last_run is None or not isinstance(sitemaps, dict) or not sitemaps.get("lastmodSinceLastRun"):
        return job_spec
    own = parse_time(sitemaps.get("lastmodAfter"))
    if own is None or own < last_run:
        job_spec = {**job_spec, "sitemaps": {**sitemaps, "lastmodAfter": format_time(last_run)}}
    return job_spec


def last_successful_start(jobs: list[Mapping[str, Any]]) -> datetime | None:
    """When the latest successful run of a cron started (its first claim; its completion if it has none)."""
    starts = [
        parse_time(j.get("startTime")) or parse_time(j.get("completionTime"))
        for j in jobs
        if j.get("phase") == "Succeeded"
    ]
    found = [t for t in starts if t is not None]
    return max(found) if found else None


async def create_job(namespace: str, body: dict[str, Any]) -> bool:
    """Create the job; False if it already exists (a retried pass after a crash)."""
    try:
        await kube.call(kube.custom().create_namespaced_custom_object, GROUP, VERSION, namespace, "scrapejobs", body)
    except Exception as exc:
        if kube.is_status(exc, 409):
            return False
        raise
    return True


def _stalled(
    new: dict[str, Any], prev: Mapping[str, Any], generation: int, now: datetime, reason: str, msg: str
) -> CronOutcome:
    """Stalled with one Warning Event per new reason; nothing is created while it lasts."""
    events = warn_if_new(prev.get("conditions"), ConditionType.STALLED, reason, msg)
    for key in ("active", "nextScheduleTime"):
        if key in prev:
            new[key] = prev[key]
    new["conditions"] = merge_conditions(
        prev.get("conditions"), list(stalled(reason, msg)), generation=generation, now=now
    )
    return CronOutcome(new, events)


def failed_cron(status: Mapping[str, Any], generation: int, now: datetime, reason: str, msg: str) -> CronOutcome:
    """The status of a pass that failed unexpectedly (the previous schedule times kept)."""
    prev = dict(status)
    new: dict[str, Any] = {"observedGeneration": generation}
    for key in ("lastScheduleTime", "lastSuccessfulTime"):
        if key in prev:
            new[key] = prev[key]
    return _stalled(new, prev, generation, now, reason, msg)


def template_pool_problem(
    pool_index: Mapping[Any, Any],
    namespace: str,
    job: ScrapeJobSpec,
    labels: Mapping[str, str] | None = None,
) -> Problem | None:
    """Why the pool the template names would refuse every job the cron creates (missing, invalid, or in
    another namespace and not shared with this one), or None. ``labels``: those of the cron's Namespace."""
    pool_ns = pool_namespace(namespace, job)
    found = pool_from_index(pool_index, pool_ns, job.pool)
    if isinstance(found, Problem):
        return Problem(found.reason, f"jobTemplate.spec.pool: {found.message}; no jobs are created until this is fixed")
    refusal = sharing_refusal(namespace, pool_ns, job.pool, found.spec.tenancy, labels)
    if refusal is not None:
        return Problem(refusal.reason, f"jobTemplate.spec: {refusal.message}; no jobs are created until this is fixed")
    return None


async def reconcile_cron(
    *,
    name: str,
    namespace: str,
    uid: str,
    generation: int,
    created: str,
    spec_raw: Mapping[str, Any],
    status: Mapping[str, Any],
    jobs: list[Mapping[str, Any]],
    now: datetime,
    pool_index: Mapping[Any, Any],
    namespaces: Mapping[Any, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> CronOutcome:
    prev = dict(status)
    events: list[Transition] = []
    new: dict[str, Any] = {"observedGeneration": generation}
    for key in ("lastScheduleTime", "lastSuccessfulTime"):
        if key in prev:
            new[key] = prev[key]
    try:
        spec = CronScrapeJobSpec.model_validate(dict(spec_raw))
    except ValidationError as exc:
        return _stalled(new, prev, generation, now, "InvalidSpec", validation_message(exc))
    labels = namespace_labels(namespaces, namespace)
    pool_problem = template_pool_problem(pool_index, namespace, spec.job_template.spec, labels)
    if pool_problem is not None:
        # Every job it would create would only fail the same way: create none until the pool exists.
        return _stalled(new, prev, generation, now, *pool_problem)

    # History limits and Replace act only on jobs this cron owns: the label alone can be set by anyone.
    jobs = [j for j in jobs if j.get("owner") == uid]
    active = sorted(j["name"] for j in jobs if j.get("phase") not in TERMINAL)
    finished = [
        (j["name"], parse_time(j.get("completionTime")) or now, j.get("phase") == "Succeeded")
        for j in jobs
        if j.get("phase") in TERMINAL
    ]
    succeeded_times = [t for _, t, ok in finished if ok]
    if succeeded_times:
        new["lastSuccessfulTime"] = format_time(max(succeeded_times))

    try:
        decision = decide(
            schedule=spec.schedule,
            time_zone=spec.time_zone,
            now=now,
            created=parse_time(created) or now,
            last_schedule=parse_time(prev.get("lastScheduleTime")),
            starting_deadline_seconds=spec.starting_deadline_seconds,
            concurrency_policy=spec.concurrency_policy.value,
            suspend=spec.suspend,
            active_jobs=active,
        )
    except (CroniterBadDateError, CroniterBadCronError, ValueError, KeyError) as exc:
        # The model rejects schedules that never fire; this catches what croniter finds only later.
        return _stalled(new, prev, generation, now, "InvalidSchedule", f"schedule {spec.schedule!r}: {exc}")
    if decision.missed > 0 and decision.create_for is not None:
        events.append(Transition("Warning", "MissedSchedule", f"skipped {decision.missed} missed schedule times"))
    if decision.skipped_reason in ("ConcurrencyForbidden", "MissedStartingDeadline"):
        if prev.get("skippedReason") != decision.skipped_reason:
            events.append(Transition("Normal", decision.skipped_reason, f"run skipped: {decision.skipped_reason}"))
        new["skippedReason"] = decision.skipped_reason
    for doomed in decision.delete_active:
        await delete_job_object(namespace, doomed)
        events.append(Transition("Normal", "SuccessfulDelete", f"replaced active job {doomed}"))
        active.remove(doomed)
    if decision.create_for is not None:
        runs_labels = inherited_labels(labels)
        body = build_job(name, uid, spec, decision.create_for, last_successful_start(jobs), runs_labels)
        if await create_job(namespace, body):
            events.append(Transition("Normal", "SuccessfulCreate", f"created ScrapeJob {body['metadata']['name']}"))
        if body["metadata"]["name"] not in active:
            active.append(body["metadata"]["name"])
        new["lastScheduleTime"] = format_time(decision.create_for)
        new.pop("skippedReason", None)
    for doomed in history_to_delete(finished, spec.successful_jobs_history_limit, spec.failed_jobs_history_limit):
        await delete_job_object(namespace, doomed)
        events.append(Transition("Normal", "SuccessfulDelete", f"deleted finished job {doomed} (history limit)"))
    new["active"] = [{"name": n} for n in sorted(active)]
    if decision.next_time is not None:
        new["nextScheduleTime"] = format_time(decision.next_time)
    msg = "suspended" if spec.suspend else f"{len(active)} active jobs"
    # Suspended is at rest by request (kstatus Current, as a schedule that runs is): see conditions.at_rest.
    health = at_rest("Suspended", msg) if spec.suspend else healthy("Scheduled", msg)
    new["conditions"] = merge_conditions(prev.get("conditions"), list(health), generation=generation, now=now)
    return CronOutcome(new, events)
