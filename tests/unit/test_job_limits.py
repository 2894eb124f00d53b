"""Issue 32, limits a tenant cannot raise: a pool's jobLimits, the check that refuses a job above them, and
what its workers are given (pure rules; tests/cluster/test_tenant_limits.py applies them as a tenant)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import Ceilings, ScrapePoolSpec
from trawl.jobspec.admission import limit_exceeded
from trawl.jobspec.wire import build_job_config

REDIS = {"url": "redis://r:6379/0"}
URLS = ["https://shop.example/a", "https://shop.example/b"]


def _job(**spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "shop", "urls": URLS, **spec})


def _pool(**spec: Any) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate({"redis": REDIS, **spec})


def test_a_pool_without_limits_grants_the_safe_defaults() -> None:
    assert _pool().ceilings() == Ceilings(
        max_response_bytes=10 * 1024 * 1024,
        requests_per_second=100.0,
        max_concurrency_per_domain=32,
        max_urls_per_job=100_000,
        max_results_retained=100_000,
        max_dead_letters_retained=10_000,
        max_priority=5,
    )


def test_an_unset_ceiling_rises_to_the_pools_own_default_and_a_set_one_is_what_it_says() -> None:
    """A pool whose author set its jobs' defaults higher than a default ceiling granted them already."""
    generous = _pool(defaults={"politeness": {"requestsPerSecond": 10000, "maxConcurrencyPerDomain": 1000}})
    assert generous.ceilings().requests_per_second == 10000
    assert generous.ceilings().max_concurrency_per_domain == 1000
    strict = _pool(jobLimits={"requestsPerSecond": 1, "maxPriority": 9, "maxDeadLettersRetained": 0})
    assert (strict.ceilings().requests_per_second, strict.ceilings().max_priority) == (1, 9)
    assert strict.ceilings().max_dead_letters_retained == 0


@pytest.mark.parametrize(
    ("defaults", "limits", "message"),
    [
        ({"request": {"maxResponseBytes": 2048}}, {"maxResponseBytes": 1024}, "request.maxResponseBytes 2048"),
        ({"politeness": {"requestsPerSecond": 500}}, {"requestsPerSecond": 100}, "requestsPerSecond 500"),
        ({"politeness": {"maxConcurrencyPerDomain": 9}}, {"maxConcurrencyPerDomain": 8}, "maxConcurrencyPerDomain 9"),
    ],
)
def test_a_pool_default_above_its_own_limit_is_refused(
    defaults: dict[str, Any], limits: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match="exceeds jobLimits"):
        _pool(defaults=defaults, jobLimits=limits)
    with pytest.raises(ValidationError, match=message):
        _pool(defaults=defaults, jobLimits=limits)


# The finding's values: 1 GiB bodies, 10,000 requests/s, 1,000 per domain, the highest priority; and what
# the pool's Redis would hold (URLs, results, a crawl's pages).
ABOVE = [
    (
        {"request": {"maxResponseBytes": 1 << 30}},
        "spec.request.maxResponseBytes 1073741824 is above the 10485760",
    ),
    ({"politeness": {"requestsPerSecond": 10000}}, "spec.politeness.requestsPerSecond 10000 is above the 100"),
    ({"politeness": {"maxConcurrencyPerDomain": 1000}}, "spec.politeness.maxConcurrencyPerDomain 1000 is above the 32"),
    ({"priority": 9}, "spec.priority 9 is above the 5"),
    (
        {"output": {"redisStream": {"maxLen": 10_000_000}}},
        "spec.output.redisStream.maxLen 10000000 is above the 100000",
    ),
    ({"crawl": {"maxPages": 1_000_000}}, "spec.crawl.maxPages 1000000 is above the 100000"),
    (
        {"urls": None, "urlRanges": [{"template": "https://shop.example/p/{n}", "start": 1, "end": 100_001}]},
        "spec.urls and spec.urlRanges: 100001 URLs is above the 100000",
    ),
]


@pytest.mark.parametrize(("spec", "message"), ABOVE, ids=lambda v: str(v)[:40])
def test_a_job_above_a_ceiling_is_refused_naming_the_field_its_value_and_the_ceiling(
    spec: dict[str, Any], message: str
) -> None:
    problem = limit_exceeded(_job(**spec), _pool())
    assert problem is not None and problem.startswith(message), problem
    assert "that ScrapePool 'shop' allows" in problem and "spec.jobLimits." in problem


def test_a_job_within_the_ceilings_is_accepted_and_may_lower_them() -> None:
    pool = _pool(jobLimits={"requestsPerSecond": 20, "maxPriority": 7, "maxUrlsPerJob": 3})
    job = _job(priority=7, politeness={"requestsPerSecond": 20, "maxConcurrencyPerDomain": 1})
    assert limit_exceeded(job, pool) is None
    assert limit_exceeded(_job(priority=0, request={"maxResponseBytes": 1}), pool) is None
    assert limit_exceeded(_job(urls=[*URLS, "https://shop.example/c"]), pool) is None
    assert "spec.urls and spec.urlRanges: 4 URLs" in (
        limit_exceeded(_job(urls=[*URLS, "https://x/c", "https://x/d"]), pool) or ""
    )
    # A crawl's pages are capped by maxPages, whatever its seeds: only maxPages counts.
    crawl = _job(urls=[f"https://shop.example/{i}" for i in range(10)], crawl={"maxPages": 3})
    assert limit_exceeded(crawl, pool) is None


def test_what_a_job_leaves_unset_resolves_within_the_ceilings() -> None:
    """A pool whose ceilings lie below the built-in defaults: a job that says nothing gets the ceiling,
    never the built-in 10 MiB, 2 requests/s, 4 per domain or 100,000 results."""
    pool = _pool(
        jobLimits={
            "maxResponseBytes": 65536,
            "requestsPerSecond": 0.5,
            "maxConcurrencyPerDomain": 2,
            "maxResultsRetained": 10,
            "maxDeadLettersRetained": 3,
        }
    )
    config = build_job_config("uid", _job(), pool)
    assert config.spec["request"]["max_response_bytes"] == 65536
    assert config.spec["politeness"]["requests_per_second"] == 0.5
    assert config.spec["politeness"]["max_concurrency_per_domain"] == 2
    assert config.spec["output"]["redis_stream"]["max_len"] == 10
    assert config.max_dead_letters_kept == 3
    # The pool's defaults and the job's own values (within the ceilings) are what they say.
    lower = build_job_config("uid", _job(politeness={"requestsPerSecond": 0.25}), pool)
    assert lower.spec["politeness"]["requests_per_second"] == 0.25
    assert lower.spec["politeness"]["max_concurrency_per_domain"] == 2
    # Without a pool (tests, `trawl run`) nothing changes.
    alone = build_job_config("uid", _job(), None)
    assert alone.spec["request"]["max_response_bytes"] == 10 * 1024 * 1024
    assert alone.spec["output"]["redis_stream"] is None and alone.max_dead_letters_kept is None


def test_a_pool_with_default_limits_changes_nothing_a_job_gets_by_default() -> None:
    """Today's effective defaults lie within the default ceilings: a job that says nothing runs as before."""
    config = build_job_config("uid", _job(), _pool())
    assert config.spec["request"]["max_response_bytes"] == 10 * 1024 * 1024
    assert config.spec["politeness"]["requests_per_second"] == 2
    assert config.spec["politeness"]["max_concurrency_per_domain"] == 4
    assert config.spec["output"]["redis_stream"]["max_len"] == 100_000
    assert config.priority == 5 and config.max_dead_letters_kept == 10_000
