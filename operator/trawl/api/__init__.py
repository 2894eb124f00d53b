"""The Trawl API (group trawl.dev, version v1alpha1): pydantic models that define the CRDs."""

from .common import API_VERSION, GROUP, VERSION, Condition, ConditionStatus
from .cronscrapejob import ConcurrencyPolicy, CronScrapeJobSpec, CronScrapeJobStatus
from .policies import (
    BackoffKind,
    FailureClass,
    PolitenessSpec,
    RequestSpec,
    ResolvedPoliteness,
    ResolvedRequest,
    ResolvedRetry,
    RetrySpec,
    resolve_politeness,
    resolve_request,
    resolve_retry,
)
from .scrapejob import JobPhase, ScrapeJobSpec, ScrapeJobStatus
from .scrapepool import ScrapePoolSpec, ScrapePoolStatus

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "BackoffKind",
    "ConcurrencyPolicy",
    "Condition",
    "ConditionStatus",
    "CronScrapeJobSpec",
    "CronScrapeJobStatus",
    "FailureClass",
    "JobPhase",
    "PolitenessSpec",
    "RequestSpec",
    "ResolvedPoliteness",
    "ResolvedRequest",
    "ResolvedRetry",
    "RetrySpec",
    "ScrapeJobSpec",
    "ScrapeJobStatus",
    "ScrapePoolSpec",
    "ScrapePoolStatus",
    "resolve_politeness",
    "resolve_request",
    "resolve_retry",
]
