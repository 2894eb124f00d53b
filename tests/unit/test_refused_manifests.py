"""Issue 32: two of 102 invalid manifests of an independent run were accepted without a word. Each is
refused now, by the model the operator reads (and, in tests/manifest_cases.py, by the API server too):
nothing runs at times no CronJob would, and no pool says Ready on a database it does not use."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.cronscrapejob import CronScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator.pool.reconcile import reconcile_pool

NOW = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)
JOB = {"pool": "p", "urls": ["https://a.example/"]}


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_cron_schedule_with_a_backwards_range_is_refused() -> None:
    manifest = {"schedule": "30-10 * * * *", "jobTemplate": {"spec": JOB}}
    with pytest.raises(ValidationError) as info:
        CronScrapeJobSpec.model_validate(manifest)
    assert "minute range 30-10 runs backwards" in str(info.value) and "write 10-30" in str(info.value)


def test_redis_url_whose_database_is_not_a_number_is_refused_and_the_pool_is_not_ready() -> None:
    spec = {"redis": {"url": "redis://redis.trawl-system.svc:6379/notanumber"}}
    with pytest.raises(ValidationError, match="must be a database number"):
        ScrapePoolSpec.model_validate(spec)
    outcome = asyncio.run(
        reconcile_pool(
            name="p",
            namespace="ns",
            uid="u",
            generation=1,
            spec_raw=spec,
            status={},
            connections=None,  # type: ignore[arg-type]  # an invalid spec is judged before any I/O
            autoscalers=None,  # type: ignore[arg-type]
            now=NOW,
        )
    )
    assert _condition(outcome.status, "Ready")["status"] == "False"
    stalled = _condition(outcome.status, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec"
    assert "spec.redis" in stalled["message"] and "database number" in stalled["message"]


@pytest.mark.parametrize(
    "url", ["redis://r:6379", "redis://r:6379/", "redis://r:6379/15", "rediss://r/0?socket_timeout=5"]
)
def test_redis_urls_with_a_database_number_or_none_stay_valid(url: str) -> None:
    assert ScrapePoolSpec.model_validate({"redis": {"url": url}}).redis.url == url
