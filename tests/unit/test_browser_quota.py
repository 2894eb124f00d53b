"""The tenant quota browserSecondsPerDay, its pure parts: the field, its place in the queue's tenant table
(and rows written before it), the day's usage, the hold decision, what the pool's status, its index, the
job's status, the metric and ``trawl top`` make of it, and the worker's page-time accumulator."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY

from trawl.api.scrapepool import ScrapePoolSpec, ScrapePoolStatus
from trawl.clitools.output import tenant_table
from trawl.clitools.top import sample_pool
from trawl.jobspec.tenancy import browser_quota_hold, browser_quota_of, over_browser_quota, tenant_policy
from trawl.operator import metrics
from trawl.operator.conditions import ConditionType, get_condition
from trawl.operator.indexes import pool_entry, pool_from_index
from trawl.operator.job.status import JobFacts, derive_job_status
from trawl.operator.pool.status import tenants_status
from trawl.queue.model import JobStats, TenantLimits, TenantUsage
from trawl.queue.tenants import decode_limits, encode_limits, tenant_usage_of
from trawl.worker.browser.usage import MAX_PENDING_JOBS, BrowserTime

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
TODAY = int(NOW.timestamp() // 86400)
TENANCY: dict[str, Any] = {
    "tenants": [
        {"name": "team-a", "quotas": {"browserSecondsPerDay": 3600, "pagesPerDay": 1000}},
        {"name": "team-b"},
    ],
    "defaultTenant": {"quotas": {"browserSecondsPerDay": 0.5}},
}


def _pool() -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}, "tenancy": TENANCY})


def _usage(tenant: str, seconds: float) -> TenantUsage:
    return TenantUsage(
        tenant=tenant, weight=1, in_flight=0, claimed_total=0, pages_today=0, browser_seconds_today=seconds
    )


def test_the_quota_flows_from_the_pool_into_the_tenant_table_whole() -> None:
    pool = _pool()
    assert pool.to_wire()["tenancy"]["tenants"][0]["quotas"]["browserSecondsPerDay"] == 3600
    policy = tenant_policy(pool.tenancy)
    assert policy.tenants["team-a"] == TenantLimits(pages_per_day=1000, browser_seconds_per_day=3600)
    assert policy.tenants["team-b"].browser_seconds_per_day is None
    assert policy.default.browser_seconds_per_day == 0.5
    assert browser_quota_of(pool.tenancy, "team-a") == 3600
    assert browser_quota_of(pool.tenancy, "anyone") == 0.5  # the default tenant's terms
    assert browser_quota_of(None, "team-a") is None
    # (A sharded pool keeps it whole on every shard: tests/integration/test_queue_browser_seconds.py.)


def test_the_table_row_gains_a_sixth_field_and_old_rows_decode_as_before() -> None:
    limits = TenantLimits(weight=2, max_in_flight=5, pages_per_day=100, max_queued=7, browser_seconds_per_day=90.5)
    row = encode_limits(limits)
    assert row == "2|5||100|7|90.5"
    assert decode_limits(row) == limits
    assert decode_limits("2|5||100|7") == TenantLimits(weight=2, max_in_flight=5, pages_per_day=100, max_queued=7)
    assert decode_limits("3|||") == TenantLimits(weight=3)
    assert encode_limits(TenantLimits()) == "1|||||"


def test_the_days_browser_time_counts_only_on_its_day() -> None:
    row = {"bday": str(TODAY), "bms": "3612500", "clm": "4"}
    assert tenant_usage_of("t", row, {}, TODAY).browser_seconds_today == 3612.5
    assert tenant_usage_of("t", row, {}, TODAY + 1).browser_seconds_today == 0.0  # yesterday's
    assert tenant_usage_of("t", {}, {}, TODAY).browser_seconds_today == 0.0


@pytest.mark.parametrize(
    ("renders", "quota", "used", "held"),
    [
        (True, 3600.0, 3612.4, "browserSecondsPerDay: 3,612/3,600 s today"),
        (True, 3600.0, 3600.0, "browserSecondsPerDay: 3,600/3,600 s today"),  # reached: held
        (True, 3600.0, 3599.9, ""),
        (False, 3600.0, 9000.0, ""),  # a plain job of the same tenant runs on
        (True, None, 9000.0, ""),  # no quota
        (True, 0.5, 0.75, "browserSecondsPerDay: 0.8/0.5 s today"),
    ],
)
def test_a_rendering_job_is_held_once_its_tenants_day_reached_the_quota(
    renders: bool, quota: float | None, used: float, held: str
) -> None:
    assert browser_quota_hold(renders=renders, quota=quota, used_today=used) == held


def test_the_pool_status_lists_the_tenants_over_it_first_and_its_index_carries_the_days_time() -> None:
    pool = _pool()
    usage = [_usage("aaa", 1.0), _usage("team-a", 3700.25), _usage("team-b", 99999.0)]
    over = over_browser_quota(pool.tenancy, {u.tenant: u.browser_seconds_today for u in usage})
    assert over == {"aaa", "team-a"}  # team-b has no quota; "aaa" has the default tenant's 0.5 s
    rows = tenants_status(
        [_usage("b-first-by-name", 0), *usage], over_browser_quota=over - {"aaa"}
    )  # held tenants come first, as the throttled do: a long list is cut after them
    assert [r["tenant"] for r in rows][:1] == ["team-a"]
    assert {r["tenant"]: r["browserSecondsToday"] for r in rows}["team-a"] == 3700.25
    ScrapePoolStatus.model_validate({"tenants": rows})
    entry = pool_entry(_pool().to_wire(), "uid-1", {"tenants": rows})
    assert entry["browser"] == {"aaa": 1.0, "team-a": 3700.25, "team-b": 99999.0}
    ref = pool_from_index({("ns", "p"): [entry]}, "ns", "p")
    assert not isinstance(ref, Exception) and getattr(ref, "browser_seconds", None) == entry["browser"]
    # An index function never raises, whatever the status holds.
    for junk in ({"tenants": [{"tenant": "x", "browserSecondsToday": "lots"}]}, {"tenants": [{"tenant": "y"}]}):
        assert pool_entry({}, "u", junk)["browser"] == {}


def _stats(pending: int, in_flight: int) -> JobStats:
    return JobStats(
        total=pending + in_flight, pending=pending, in_flight=in_flight, retrying=0, succeeded=0, dead=0,
        enqueue_done=True, suspended=True, first_claim_at=None,
    )  # fmt: skip


@pytest.mark.parametrize("in_flight", [0, 2])  # nothing claimed, or its last tasks still finishing
def test_a_held_job_waits_in_progress_saying_until_when(in_flight: int) -> None:
    figure = "browserSecondsPerDay: 3,612/3,600 s today"
    facts = JobFacts(generation=1, suspend=False, stats=_stats(10, in_flight), browser_quota=figure)
    status, events = derive_job_status(facts, {}, NOW)
    reconciling = get_condition(status["conditions"], ConditionType.RECONCILING)
    stalled = get_condition(status["conditions"], ConditionType.STALLED)
    suspended = get_condition(status["conditions"], ConditionType.SUSPENDED)
    assert reconciling is not None and (reconciling["status"], reconciling["reason"]) == ("True", "QuotaExceeded")
    assert reconciling["message"] == (
        "its tenant is over a quota of its pool (browserSecondsPerDay: 3,612/3,600 s today): its browser tasks "
        "wait until 00:00 UTC"
    )
    assert stalled is not None and stalled["status"] == "False"
    assert suspended is None or suspended["status"] == "False"  # the user's spec.suspend is not the reason
    assert status["phase"] in ("Queued", "Running")
    assert not [e for e in events if e.type == "Warning"]


def test_the_metric_and_trawl_top_show_the_days_browser_time() -> None:
    rows = tenants_status([_usage("team-a", 3612.0)], over_browser_quota={"team-a"})
    metrics.record_pool("ns", "shared", {"tenants": rows})
    try:
        value = REGISTRY.get_sample_value(
            "trawl_tenant_browser_seconds_today", {"namespace": "ns", "pool": "shared", "tenant": "team-a"}
        )
    finally:
        metrics.forget_pool("ns", "shared")
    assert value == 3612.0
    sample = sample_pool({"metadata": {"name": "shared", "namespace": "ns"}, "status": {"tenants": rows}}, 0.0)
    assert sample.tenants[0].browser_seconds_today == 3612.0
    table = tenant_table([sample])
    assert table is not None and "BROWSER S TODAY" in [c.header for c in table.columns]


def test_the_worker_keeps_page_time_per_job_until_a_flush_succeeds() -> None:
    time = BrowserTime()
    time.add("j1", 1.5)
    time.add("j2", 0.25)
    time.add("j1", 0.5)
    time.add("j3", 0.0)  # nothing held: nothing to send
    sent: list[dict[str, float]] = []

    async def failing(batch: dict[str, float]) -> None:
        raise ConnectionError("Redis away")

    async def send(batch: dict[str, float]) -> None:
        sent.append(batch)

    with pytest.raises(ConnectionError):
        asyncio.run(time.flush(failing))
    time.add("j2", 1.0)  # measured while the send failed: added to what it kept
    asyncio.run(time.flush(send))
    asyncio.run(time.flush(send))  # nothing pending: no call
    assert sent == [{"j1": 2.0, "j2": 1.25}]
    for i in range(MAX_PENDING_JOBS + 5):  # bounded while Redis stays away
        time.add(f"j{i}", 1.0)
    assert len(time.pending()) == MAX_PENDING_JOBS
