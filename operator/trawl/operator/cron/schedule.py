"""CronScrapeJob scheduling decisions, following the CronJob controller's contract (pure, no I/O).

- The most recent unmet schedule time after ``lastScheduleTime`` (or creation) is the candidate;
  older missed ones are skipped, as CronJob does after an outage (at most 100 are counted: they are
  found walking back from now, so a CronScrapeJob created years ago decides as fast as a new one).
- ``startingDeadlineSeconds`` bounds how late a start may be; a later one is missed.
- Forbid skips while a job is active (the run happens once the active job ends, if still within
  the deadline); Replace deletes the active jobs first; Allow just starts another.
- Job names derive from the scheduled minute, so a crash between creating the job and recording
  ``lastScheduleTime`` cannot create the same run twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from trawl.api.cronscrapejob import croniter_schedule

MAX_MISSED_TO_COUNT = 100


@dataclass(frozen=True, slots=True)
class CronDecision:
    create_for: datetime | None  # the scheduled time to start a job for, if any
    delete_active: list[str] = field(default_factory=list)  # Replace: jobs to delete first
    missed: int = 0  # schedule times skipped (not counting create_for)
    skipped_reason: str | None = None  # why create_for is None although a time was due
    next_time: datetime | None = None  # when the next schedule time falls


def schedule_times(
    schedule: str, time_zone: str | None, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """Schedule times t with after < t <= until, at most ``limit`` of the latest (UTC), oldest first.

    Walked back from ``until``, at most ``limit`` steps: the cost is bounded by the limit, never by how far
    back ``after`` lies (``* * * * *`` created years ago would otherwise be millions of steps on the
    operator's event loop, at every pass)."""
    if until <= after or limit <= 0:
        return []
    tz = ZoneInfo(time_zone or "UTC")
    # get_prev returns times strictly before its start: a microsecond after ``until`` includes it.
    it = croniter(croniter_schedule(schedule), (until + timedelta(microseconds=1)).astimezone(tz))
    times: list[datetime] = []
    while len(times) < limit:
        t = it.get_prev(datetime).astimezone(UTC)
        if t <= after:
            break
        times.append(t)
    times.reverse()
    return times


def next_time(schedule: str, time_zone: str | None, after: datetime) -> datetime:
    tz = ZoneInfo(time_zone or "UTC")
    t: datetime = croniter(croniter_schedule(schedule), after.astimezone(tz)).get_next(datetime)
    return t.astimezone(UTC)


def decide(
    *,
    schedule: str,
    time_zone: str | None,
    now: datetime,
    created: datetime,
    last_schedule: datetime | None,
    starting_deadline_seconds: int | None,
    concurrency_policy: str,
    suspend: bool,
    active_jobs: list[str],
) -> CronDecision:
    upcoming = next_time(schedule, time_zone, now)
    if suspend:
        return CronDecision(None, skipped_reason="Suspended", next_time=upcoming)
    earliest = last_schedule or created
    if starting_deadline_seconds is not None:
        earliest = max(earliest, now - timedelta(seconds=starting_deadline_seconds + 1))
    due = schedule_times(schedule, time_zone, earliest, now, MAX_MISSED_TO_COUNT)
    if not due:
        return CronDecision(None, next_time=upcoming)
    candidate = due[-1]
    missed = len(due) - 1
    if starting_deadline_seconds is not None and (now - candidate).total_seconds() > starting_deadline_seconds:
        return CronDecision(None, missed=len(due), skipped_reason="MissedStartingDeadline", next_time=upcoming)
    if active_jobs and concurrency_policy == "Forbid":
        return CronDecision(None, missed=missed, skipped_reason="ConcurrencyForbidden", next_time=upcoming)
    delete = list(active_jobs) if concurrency_policy == "Replace" else []
    return CronDecision(candidate, delete_active=delete, missed=missed, next_time=upcoming)


def job_name(cron_name: str, scheduled: datetime) -> str:
    """<cron>-<minutes since the epoch>, as the CronJob controller names Jobs."""
    return f"{cron_name}-{int(scheduled.timestamp() // 60)}"


def history_to_delete(finished: list[tuple[str, datetime, bool]], keep_succeeded: int, keep_failed: int) -> list[str]:
    """Names of finished jobs beyond the history limits, oldest first. Items: (name, finished at, succeeded)."""
    doomed: list[str] = []
    for succeeded, keep in ((True, keep_succeeded), (False, keep_failed)):
        jobs = sorted((j for j in finished if j[2] is succeeded), key=lambda j: j[1])
        excess = len(jobs) - keep
        doomed += [name for name, _, _ in jobs[: max(excess, 0)]]
    return doomed
