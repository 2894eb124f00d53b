"""ScrapeJob.spec.refresh: crawl the same pages again and report what changed since the last run.

A refresh job keeps, per URL, what it learnt last time (the page's validators and a fingerprint of the content
that matters) in its pool's Redis, under a *lineage*: the jobs that compare with each other. Each run sends
conditional requests (a ``304 Not Modified`` costs no body, no extraction and no write), fingerprints what it
did fetch, and labels every page ``new``, ``changed``, ``unchanged`` or ``gone``.

A lineage is always inside the job's own namespace (the operator prefixes it): a job author can compare with
the other runs of their own jobs, never read or overwrite another team's page state.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from .common import DNSLabel, TrawlModel

DEFAULT_RETAIN_DAYS = 30
MAX_RETAIN_DAYS = 366


class Fingerprint(StrEnum):
    """What must differ for a page to count as changed."""

    RECORD = "Record"  # the fields the job extracts (a rotating ad or a timestamp it does not select is noise)
    TEXT = "Text"  # the page's readable text (markup, scripts and styles are not)
    BODY = "Body"  # the response's bytes


class RefreshRecords(StrEnum):
    """Which pages write a record."""

    CHANGES = "Changes"  # new, changed and gone pages
    ALL = "All"  # every page, unchanged ones included


class RevisitSpec(TrawlModel):
    """Adaptive revisits: a page whose content has not changed for a while is fetched again only after half
    that while has passed, bounded by minHours and maxHours (Nutch's adaptive fetch schedule, in its simplest
    form). A page not due is labelled unchanged without a request (the job's status counts it as
    notRevisited), so a change on it is seen at its next visit, at most maxHours later. Pages whose links a
    crawl follows are always fetched (their links are the crawl), and forceRefresh fetches everything."""

    max_hours: float = Field(
        ge=0.1,
        le=MAX_RETAIN_DAYS * 24,
        description="The longest a page may go without a visit, however long it has not changed. Keep it below "
        "retainDays: a lineage whose runs write nothing for retainDays is dropped.",
    )
    min_hours: float = Field(
        default=0,
        ge=0,
        le=MAX_RETAIN_DAYS * 24,
        description="The shortest interval between two visits of a page that has not changed in its last visit "
        "(0: a page is always due once half its unchanged time has passed). At most maxHours.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_hours > self.max_hours:
            raise ValueError(f"revisit.minHours {self.min_hours:g} is above maxHours {self.max_hours:g}")
        return self


class RefreshSpec(TrawlModel):
    """Fetch the pages again and label each new, changed, unchanged or gone against the lineage's last run."""

    lineage: DNSLabel | None = Field(
        default=None,
        description="The name under which this job's page state is kept and compared, within the job's "
        "namespace. Default: the CronScrapeJob that created the job, else the job's own name (so re-creating a "
        "job of the same name compares with its previous run).",
    )
    fingerprint: Fingerprint = Field(
        default=Fingerprint.RECORD,
        description="What must differ for a page to count as changed: Record (the extracted fields: noise the "
        "job does not select is ignored), Text (the readable text) or Body (the bytes).",
    )
    conditional_requests: bool = Field(
        default=True,
        description="Send If-None-Match / If-Modified-Since with the validators of the last run: a 304 answer "
        "counts as unchanged with no body fetched and nothing extracted.",
    )
    force_refresh: bool = Field(
        default=False,
        description="Fetch every page in full (no conditional requests); changes are still labelled.",
    )
    records: RefreshRecords = Field(
        default=RefreshRecords.CHANGES,
        description="Changes: only new, changed and gone pages write a record (what a sink receives). All: "
        "unchanged pages too (with no extracted fields when the server answered 304).",
    )
    retain_days: int = Field(
        default=DEFAULT_RETAIN_DAYS,
        ge=1,
        le=MAX_RETAIN_DAYS,
        description="The lineage's page state is dropped when no run of it wrote for this many days.",
    )

    changed_fields: bool = Field(
        default=False,
        description="Name, on a changed page's record, the extracted fields whose values differ from the last "
        "run's (changedFields; a field that disappeared is not named). Keeps a short digest per field in the "
        "page state: up to 64 fields, at most 576 more bytes per URL.",
    )
    revisit: RevisitSpec | None = Field(
        default=None,
        description="Adaptive revisits: pages that rarely change are fetched less often, within the bounds "
        "given. Unset: every run fetches every page (conditionally where it can).",
    )

    def conditional(self) -> bool:
        return self.conditional_requests and not self.force_refresh
