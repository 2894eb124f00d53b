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

from pydantic import Field

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

    def conditional(self) -> bool:
        return self.conditional_requests and not self.force_refresh
