"""The Trawl API (group trawl.dev, version v1alpha1): pydantic models that define the CRDs.

The names below are loaded on first use (PEP 562): a worker imports ``trawl.api.policies`` and
``trawl.api.scrapejob`` only, and must not pay for building the CronScrapeJob and ScrapePool models (and
importing croniter) at start-up. ``from trawl.api import ScrapeJobSpec`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .common import Condition, ConditionStatus
    from .cronscrapejob import ConcurrencyPolicy, CronScrapeJobSpec, CronScrapeJobStatus
    from .naming import API_VERSION, GROUP, VERSION
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

_WHERE = {
    "common": ("Condition", "ConditionStatus"),
    "naming": ("API_VERSION", "GROUP", "VERSION"),
    "cronscrapejob": ("ConcurrencyPolicy", "CronScrapeJobSpec", "CronScrapeJobStatus"),
    "policies": (
        "BackoffKind",
        "FailureClass",
        "PolitenessSpec",
        "RequestSpec",
        "ResolvedPoliteness",
        "ResolvedRequest",
        "ResolvedRetry",
        "RetrySpec",
        "resolve_politeness",
        "resolve_request",
        "resolve_retry",
    ),
    "scrapejob": ("JobPhase", "ScrapeJobSpec", "ScrapeJobStatus"),
    "scrapepool": ("ScrapePoolSpec", "ScrapePoolStatus"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

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
assert sorted(__all__) == sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once loaded, a plain module attribute
    return value
