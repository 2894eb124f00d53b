"""CronScrapeJob: creates ScrapeJobs on a schedule, with the CronJob contract."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from pydantic import Field, field_validator

from .common import Condition, LocalObjectReference, TrawlModel
from .scrapejob import ScrapeJobSpec


def _cron_field(value: str) -> str:
    item = rf"(\*|{value}(-{value})?)(/[1-9][0-9]*)?"
    return rf"{item}(,{item})*"


_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
_DAYS = "sun|mon|tue|wed|thu|fri|sat"
# A shape check the API server can run (RE2); croniter then checks the full semantics.
_CRON_BODY = (
    r"(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + r"\s+".join(
        [
            _cron_field(r"[0-5]?[0-9]"),
            _cron_field(r"([01]?[0-9]|2[0-3])"),
            rf"(\?|{_cron_field(r'(0?[1-9]|[12][0-9]|3[01])')})",
            _cron_field(rf"(0?[1-9]|1[0-2]|{_MONTHS})"),
            rf"(\?|{_cron_field(rf'([0-7]|{_DAYS})')})",
        ]
    )
    + r")"
)
CRON_PATTERN = rf"^(?i){_CRON_BODY}$"
# The same check in Python (which only accepts inline flags at the very start), so pydantic and the
# API server accept exactly the same shapes (no croniter extensions such as L, # or a leading space).
_CRON_RE = re.compile(rf"^{_CRON_BODY}$", re.IGNORECASE)
# IANA zone names: Area/Location[/Sub], or UTC-like single words.
TIMEZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$"


class ConcurrencyPolicy(StrEnum):
    ALLOW = "Allow"
    FORBID = "Forbid"
    REPLACE = "Replace"


class JobTemplateMetadata(TrawlModel):
    """Labels and annotations copied onto each created ScrapeJob."""

    labels: dict[str, str] | None = Field(default=None, description="Labels of created jobs.")
    annotations: dict[str, str] | None = Field(default=None, description="Annotations of created jobs.")


class ScrapeJobTemplate(TrawlModel):
    """The ScrapeJob created at each scheduled time."""

    metadata: JobTemplateMetadata | None = Field(default=None, description="Metadata of created jobs.")
    spec: ScrapeJobSpec = Field(description="Spec of created jobs.")


_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
_NAME_VALUES = {
    **{m: i for i, m in enumerate(_MONTHS.split("|"), start=1)},
    **{d: i for i, d in enumerate(_DAYS.split("|"))},
}


def _value(token: str) -> int:
    """A number or a month or day name of a schedule whose shape the pattern accepted."""
    return int(token) if token.isdigit() else _NAME_VALUES[token.lower()]


def _items(schedule: str) -> list[list[str]]:
    """The list items of each of the five fields (none for @hourly and its kind)."""
    return [] if schedule.startswith("@") else [field.split(",") for field in schedule.split()]


def reversed_range(schedule: str) -> str | None:
    """Why a schedule with a range that runs backwards (``30-10``) is refused, or None.

    Kubernetes' CronJob refuses such a range ("beginning of range beyond end of range"); croniter reads
    it as a wrap-around (30-59 and 0-10), so it would run at times no CronJob would."""
    for index, items in enumerate(_items(schedule)):
        for item in items:
            low, _, high = item.split("/", 1)[0].partition("-")
            if high and _value(low) > _value(high):
                return (
                    f"{schedule!r}: the {_FIELD_NAMES[index]} range {low}-{high} runs backwards; as for a "
                    f"CronJob, a range is low-high: write {high}-{low}, or two ranges joined by a comma"
                )
    return None


def _cel_value(side: str) -> str:
    names = ", ".join(f"'{k}': {v}" for k, v in _NAME_VALUES.items())
    return f"(r.split('-')[{side}].matches('^[0-9]+$') ? int(r.split('-')[{side}]) : {{{names}}}[r.split('-')[{side}]])"


# reversed_range for the API server, so a CronScrapeJob with a backwards range is refused when it is
# applied, as a CronJob is. The pattern has checked the shape (numbers, names); every a-b range is
# compared by value (names as numbers: jan=1, sun=0).
REVERSED_RANGE_RULE = {
    "rule": "self.schedule.lowerAscii().findAll('[0-9a-z]+-[0-9a-z]+').all(r, "
    + f"{_cel_value('0')} <= {_cel_value('1')})",
    "message": "schedule: a range runs backwards (e.g. 30-10); as for a CronJob, a range is low-high",
    "fieldPath": ".schedule",
}


def croniter_schedule(schedule: str) -> str:
    """The schedule as croniter must be given it to mean what a CronJob means by it.

    A range whose ends are equal (``5-5``, ``mon-mon``, with or without a step) is that one value to a
    CronJob; croniter reads it as ``*`` (every minute, every hour...), so it is written as the value."""
    fields = _items(schedule)
    if not fields:
        return schedule
    out = []
    for items in fields:
        kept = []
        for item in items:
            low, _, high = item.split("/", 1)[0].partition("-")
            kept.append(low if high and _value(low) == _value(high) else item)
        out.append(",".join(kept))
    return " ".join(out)


def schedule_fires(schedule: str) -> bool:
    """Whether a syntactically valid schedule has a next time at all (``0 0 30 2 *`` has none).

    Searched from a leap day so that ``29 2`` counts; croniter gives up on impossible dates itself."""
    try:
        croniter(croniter_schedule(schedule), datetime(2024, 2, 28, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadDateError, CroniterBadCronError, ValueError):
        return False
    return True


class CronScrapeJobSpec(TrawlModel):
    """Desired state of a CronScrapeJob."""

    schedule: str = Field(
        min_length=1,
        max_length=256,
        json_schema_extra={"pattern": CRON_PATTERN},
        description="Cron schedule in the five-field format (minute hour day-of-month month day-of-week), "
        "or @hourly, @daily, @weekly, @monthly, @yearly.",
    )
    time_zone: str | None = Field(
        default=None,
        max_length=64,
        pattern=TIMEZONE_PATTERN,
        description="IANA time zone of the schedule, e.g. Europe/Paris. Default: UTC.",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default=ConcurrencyPolicy.ALLOW,
        description="Allow: jobs may overlap. Forbid: skip a run while the previous job is active. "
        "Replace: delete the active job and start the new one.",
    )
    starting_deadline_seconds: int | None = Field(
        default=None, ge=0, description="A run missed by more than this is skipped (counted as missed)."
    )
    suspend: bool = Field(default=False, description="Create no new jobs while true.")
    successful_jobs_history_limit: int = Field(default=3, ge=0, le=100, description="Succeeded jobs kept.")
    failed_jobs_history_limit: int = Field(default=1, ge=0, le=100, description="Failed jobs kept.")
    job_template: ScrapeJobTemplate = Field(description="Template of the created ScrapeJobs.")

    @field_validator("schedule")
    @classmethod
    def _valid_schedule(cls, value: str) -> str:
        if not _CRON_RE.match(value):
            raise ValueError(
                f"{value!r} is not a cron schedule: five fields (minute hour day-of-month month day-of-week) "
                "of numbers, names, *, ranges, lists and steps, or @hourly, @daily, @weekly, @monthly, @yearly"
            )
        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a valid cron schedule")
        if len(value.split()) not in (1, 5):
            raise ValueError(f"{value!r}: use five fields (minute hour day-of-month month day-of-week)")
        backwards = reversed_range(value)
        if backwards is not None:
            raise ValueError(backwards)
        if not schedule_fires(value):
            raise ValueError(f"{value!r} never fires (no such date, e.g. February 30)")
        return value

    @field_validator("time_zone")
    @classmethod
    def _valid_zone(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"{value!r} is not a known IANA time zone") from exc
        return value


class CronScrapeJobStatus(TrawlModel):
    """Observed state of a CronScrapeJob."""

    observed_generation: int = Field(default=-1, description="The .metadata.generation the status reflects.")
    last_schedule_time: datetime | None = Field(default=None, description="When a job was last scheduled.")
    last_successful_time: datetime | None = Field(default=None, description="When a job last succeeded.")
    next_schedule_time: datetime | None = Field(default=None, description="When the next job is due.")
    skipped_reason: str | None = Field(
        default=None, max_length=256, description="Why the latest due run was skipped (ConcurrencyForbidden, ...)."
    )
    active: list[LocalObjectReference] | None = Field(default=None, description="Jobs created and not finished.")
    conditions: list[Condition] | None = Field(default=None, description="Ready, Reconciling, Stalled.")
