"""Issue 33, the platform's side of tenancy: a pool's tenants, priority classes and quotas as the model
validates them, where admission places a job (its tenant, its priority, or why it is refused), the table the
pool writes for the queue, and how a quota that holds a tenant back shows (pool status, job status,
metrics, ``trawl top``). The fairness itself is the queue's (claim.lua) and is tested there;
tests/cluster/test_tenant_priorities.py applies these rules as a tenant against a real API server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec, ScrapePoolStatus
from trawl.api.tenancy import TenancyRefusal
from trawl.clitools.output import tenant_table
from trawl.clitools.top import sample_pool
from trawl.jobspec.admission import limit_exceeded
from trawl.jobspec.tenancy import Placement, place_job, tenant_of, tenant_policy
from trawl.jobspec.wire import build_job_config
from trawl.operator import metrics
from trawl.operator.conditions import ConditionType, get_condition
from trawl.operator.indexes import pool_entry, pool_from_index
from trawl.operator.job.status import JobFacts, derive_job_status
from trawl.operator.pool.status import tenants_status
from trawl.queue.model import JobStats, TenantLimits, TenantPolicy, TenantUsage

REDIS = {"url": "redis://r:6379/0"}
URLS = ["https://shop.example/a"]
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

CLASSES = [
    {"name": "urgent", "value": 9},
    {"name": "high", "value": 8},
    {"name": "normal", "value": 5, "globalDefault": True},
    {"name": "bulk", "value": 1},
]
TENANCY: dict[str, Any] = {
    "agingSeconds": 120,
    "priorityClasses": CLASSES,
    "tenants": [
        {
            "name": "team-a",
            "weight": 3,
            "priorityCeiling": "high",
            "defaultPriorityClass": "normal",
            "quotas": {"inFlight": 20, "requestsPerSecond": 50, "pagesPerDay": 1_000_000},
        },
        {"name": "team-b", "weight": 2, "priorityCeiling": "bulk"},
        {"name": "team-c"},
    ],
}


def _pool(tenancy: dict[str, Any] | None = TENANCY, **spec: Any) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate({"redis": REDIS, **({"tenancy": tenancy} if tenancy else {}), **spec})


def _job(**spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "shared", "urls": URLS, **spec})


# ------------------------------------------------------------------ the model


@pytest.mark.parametrize(
    ("tenancy", "message"),
    [
        ({"priorityClasses": [*CLASSES, {"name": "high", "value": 7}]}, "names must be unique, repeated: high"),
        (
            {"priorityClasses": [{"name": "a", "value": 1, "globalDefault": True}, {"name": "b", "value": 2,
                                                                                   "globalDefault": True}]},
            "only one class may be globalDefault, not a, b",
        ),
        ({"tenants": [{"name": "t"}, {"name": "t"}]}, "tenancy.tenants names must be unique, repeated: t"),
        (
            {"priorityClasses": CLASSES, "tenants": [{"name": "t", "priorityCeiling": "vip"}]},
            "tenancy.tenants[t].priorityCeiling 'vip' is not a class of tenancy.priorityClasses (defined: bulk, "
            "high, normal, urgent)",
        ),
        (
            {"defaultTenant": {"defaultPriorityClass": "normal"}},
            "tenancy.defaultTenant.defaultPriorityClass 'normal' is not a class of tenancy.priorityClasses "
            "(defined: none)",
        ),
        (
            {"priorityClasses": CLASSES, "tenants": [{"name": "t", "priorityCeiling": "bulk",
                                                      "defaultPriorityClass": "high"}]},
            "tenancy.tenants[t].defaultPriorityClass 'high' (8) is above its priorityCeiling 'bulk' (1)",
        ),
        ({"tenants": [{"name": "t", "weight": 0}]}, "greater than or equal to 1"),
        ({"priorityClasses": [{"name": "x", "value": 10}]}, "less than or equal to 9"),
        ({"tenants": [{"name": "team a"}]}, "should match pattern"),
        ({"tenants": [{"name": "t", "quotas": {"browserSecondsPerDay": 0}}]}, "browserSecondsPerDay"),
        ({"defaultTenant": {"quotas": {"browserSecondsPerDay": 1e13}}}, "browserSecondsPerDay"),
        ({"tenants": [{"name": "t", "quotas": {"browserMinutesPerDay": 60}}]}, "browserMinutesPerDay"),
        ({"defaultTenant": {"quotas": {"urlsQueued": 0}}}, "urlsQueued"),
        ({"tenants": [{"name": "aging"}]}, "tenant name 'aging' is reserved"),
        ({"tenantLabel": "not a key"}, "should match pattern"),
        ({"tenantLabel": "example.com/" + "n" * 64}, "is not a valid label key"),
    ],
)  # fmt: skip
def test_a_tenancy_the_platform_gets_wrong_is_refused_saying_what(tenancy: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        _pool(tenancy)


def test_a_valid_tenancy_round_trips_in_the_wire_form() -> None:
    pool = _pool()
    assert pool.tenancy is not None
    assert ScrapePoolSpec.model_validate(pool.to_wire()) == pool
    assert pool.to_wire()["tenancy"]["tenants"][0]["quotas"] == {
        "inFlight": 20,
        "requestsPerSecond": 50.0,
        "pagesPerDay": 1_000_000,
    }


# ------------------------------------------------------------------ placing a job


@pytest.mark.parametrize(
    ("namespace", "job", "placed"),
    [
        ("team-a", {}, Placement("team-a", 5)),  # the tenant's default class
        ("team-a", {"priorityClassName": "high"}, Placement("team-a", 8)),  # at its ceiling
        ("team-a", {"priorityClassName": "bulk"}, Placement("team-a", 1)),
        ("team-a", {"priority": 7}, Placement("team-a", 7)),  # a number within the ceiling
        ("team-a", {"priority": 8, "priorityClassName": "high"}, Placement("team-a", 8)),  # both, agreeing
        ("team-b", {}, Placement("team-b", 1)),  # the global default (5) lowered to its ceiling
        ("team-c", {}, Placement("team-c", 5)),  # the global default
        ("team-c", {"priority": 9}, TenancyRefusal("PriorityAboveCeiling", "")),  # no ceiling: jobLimits (5)
    ],
)
def test_a_job_runs_at_what_it_named_within_its_tenants_ceiling(
    namespace: str, job: dict[str, Any], placed: Placement | TenancyRefusal
) -> None:
    got = place_job(namespace, _job(**job), _pool())
    if isinstance(placed, TenancyRefusal):
        assert isinstance(got, TenancyRefusal) and got.reason == placed.reason
    else:
        assert got == placed


def test_a_class_above_the_ceiling_is_refused_never_lowered() -> None:
    got = place_job("team-a", _job(priorityClassName="urgent"), _pool())
    assert got == TenancyRefusal(
        "PriorityAboveCeiling",
        "spec.priorityClassName 'urgent' (9) is above what the pool grants tenant 'team-a': its priorityCeiling "
        "'high' (8); ask for at most that, or have the platform raise the tenant's ceiling",
    )
    number = place_job("team-b", _job(priority=2), _pool())
    assert isinstance(number, TenancyRefusal) and number.reason == "PriorityAboveCeiling"
    assert number.message.startswith("spec.priority 2 is above what the pool grants tenant 'team-b'")
    # A tenant without a ceiling of its own is held to the pool's jobLimits.maxPriority.
    raised = place_job("team-c", _job(priority=9), _pool(jobLimits={"maxPriority": 9}))
    assert raised == Placement("team-c", 9)
    held = place_job("team-c", _job(priority=9), _pool())
    assert isinstance(held, TenancyRefusal) and "the pool's jobLimits.maxPriority (5)" in held.message


def test_an_unknown_or_conflicting_class_is_refused() -> None:
    unknown = place_job("team-a", _job(priorityClassName="vip"), _pool())
    assert unknown == TenancyRefusal(
        "PriorityClassNotFound",
        "spec.priorityClassName 'vip' is not a priority class of the pool (its spec.tenancy.priorityClasses: "
        "urgent, high, normal, bulk)",
    )
    conflict = place_job("team-a", _job(priorityClassName="bulk", priority=3), _pool())
    assert isinstance(conflict, TenancyRefusal) and conflict.reason == "PriorityConflict"
    no_tenancy = place_job("team-a", _job(priorityClassName="high"), _pool(None))
    assert isinstance(no_tenancy, TenancyRefusal) and no_tenancy.reason == "PriorityClassNotFound"
    assert "defines no priority classes" in no_tenancy.message


def test_a_tenant_the_pool_does_not_list_is_refused_unless_there_is_a_default() -> None:
    refused = place_job("intruder", _job(), _pool())
    assert refused == TenancyRefusal(
        "TenantNotAdmitted",
        "tenant 'intruder' (the job's namespace) is not admitted to ScrapePool 'shared': the pool's spec.tenancy "
        "lists tenants team-a, team-b, team-c and has no defaultTenant; ask the platform to add the tenant",
    )
    with_default = {**TENANCY, "defaultTenant": {"weight": 1, "priorityCeiling": "normal"}}
    assert place_job("intruder", _job(), _pool(with_default)) == Placement("intruder", 5)
    above = place_job("intruder", _job(priorityClassName="high"), _pool(with_default))
    assert isinstance(above, TenancyRefusal) and above.reason == "PriorityAboveCeiling"


def test_with_a_tenant_label_the_namespaces_label_names_the_tenant_and_nothing_else_does() -> None:
    labelled = _pool({**TENANCY, "tenantLabel": "trawl.dev/tenant", "defaultTenant": {"weight": 1}})
    assert labelled.tenancy is not None
    team_a = {"trawl.dev/tenant": "team-a", "other": "x"}
    # A namespace of any name is the tenant its label says: team-a's ceiling and default class hold.
    assert place_job("etl-prod", _job(), labelled, team_a) == Placement("team-a", 5)
    refused = place_job("etl-prod", _job(priorityClassName="urgent"), labelled, team_a)
    assert isinstance(refused, TenancyRefusal) and "tenant 'team-a'" in refused.message
    # Without the label, refused, even with a defaultTenant, and even if the namespace is named like a tenant
    # (a team that may create namespaces could otherwise take another's terms).
    for labels in (None, {}, {"trawl.dev/tenant": ""}):
        missing = tenant_of("team-a", labelled.tenancy, labels)
        assert missing == TenancyRefusal(
            "TenantNotAdmitted",
            "namespace 'team-a' has no label trawl.dev/tenant, which names the tenant on this pool: ask the platform "
            "to label the namespace",
        )
    unlisted = place_job("ns", _job(), _pool({**TENANCY, "tenantLabel": "trawl.dev/tenant"}), {"trawl.dev/tenant": "x"})
    assert isinstance(unlisted, TenancyRefusal) and unlisted.reason == "TenantNotAdmitted"
    assert "tenant 'x' (its namespace's trawl.dev/tenant) is not admitted" in unlisted.message
    # A name the queue's table cannot hold is refused, not an error at registration.
    assert tenant_of("aging", _pool().tenancy, None) == TenancyRefusal(  # type: ignore[arg-type]
        "TenantNotAdmitted", "'aging' cannot be a tenant's name on this pool"
    )


def test_without_tenancy_a_job_keeps_todays_priority_rules() -> None:
    pool = _pool(None)
    assert place_job("anyone", _job(priority=3), pool) is None
    assert build_job_config("uid", _job(), pool).priority == 5  # unset: 5, as the field's default was
    assert build_job_config("uid", _job(priority=2), pool).priority == 2
    assert build_job_config("uid", _job(), pool).tenant == ""
    message = limit_exceeded(_job(priority=9), pool)
    assert message is not None and "spec.jobLimits.maxPriority" in message
    # With tenancy the tenant's ceiling decides, not jobLimits.maxPriority (a class of 8 is the platform's).
    assert limit_exceeded(_job(priority=8), _pool()) is None


# ------------------------------------------------------------------ the table the queue reads


def test_the_pool_writes_each_tenants_weight_and_quotas_for_the_queue() -> None:
    tenancy = _pool({**TENANCY, "defaultTenant": {"weight": 2, "quotas": {"inFlight": 4}}}).tenancy
    assert tenant_policy(tenancy) == TenantPolicy(
        tenants={
            "team-a": TenantLimits(weight=3, max_in_flight=20, requests_per_second=50.0, pages_per_day=1_000_000),
            "team-b": TenantLimits(weight=2),
            "team-c": TenantLimits(weight=1),
        },
        default=TenantLimits(weight=2, max_in_flight=4),
        aging_seconds=120.0,
    )
    # No tenancy: an empty table, every limit off (what a pool that dropped its tenancy writes once).
    assert tenant_policy(None) == TenantPolicy()


# ------------------------------------------------------------------ what a quota shows


def _usage(tenant: str, throttled: str | None = None, **more: Any) -> TenantUsage:
    return TenantUsage(
        tenant=tenant,
        weight=more.pop("weight", 1),
        in_flight=more.pop("in_flight", 0),
        claimed_total=more.pop("claimed_total", 0),
        pages_today=more.pop("pages_today", 0),
        throttled=throttled,
        throttled_message="20/20 in flight" if throttled else "",
        throttled_since=NOW.timestamp() - 90 if throttled else None,
    )


def test_the_pool_status_lists_tenants_the_throttled_first() -> None:
    rows = tenants_status(
        [_usage("team-c", claimed_total=4), _usage("team-a", "inFlight", weight=3, in_flight=20, pages_today=700)]
    )
    assert rows == [
        {
            "tenant": "team-a",
            "weight": 3,
            "inFlight": 20,
            "claimedTotal": 0,
            "pagesToday": 700,
            "browserSecondsToday": 0.0,
            "queued": 0,
            "throttled": "inFlight",
            "throttledMessage": "20/20 in flight",
            "throttledSince": "2026-11-27T11:58:30Z",
        },
        {
            "tenant": "team-c",
            "weight": 1,
            "inFlight": 0,
            "claimedTotal": 4,
            "pagesToday": 0,
            "browserSecondsToday": 0.0,
            "queued": 0,
        },
    ]
    ScrapePoolStatus.model_validate({"tenants": rows})  # what the CRD's schema takes


def test_a_tenant_whose_queue_is_full_shows_it_on_the_pool_and_on_its_waiting_job() -> None:
    full = _usage("team-b")._replace(queued=1000, queue_full_message="1000/1000 URLs queued")
    [row] = tenants_status([full])
    assert row["queued"] == 1000 and row["queueFullMessage"] == "1000/1000 URLs queued"
    ScrapePoolStatus.model_validate({"tenants": [row]})
    entry = pool_entry({"redis": {}}, "uid-1", {"tenants": [row]})
    assert entry["queueFull"] == {"team-b": "1000/1000 URLs queued"} and entry["throttled"] == {}


def test_the_pool_index_tells_each_job_which_tenants_a_quota_holds() -> None:
    status = {"tenants": tenants_status([_usage("team-a", "inFlight"), _usage("team-c")])}
    entry = pool_entry({"redis": REDIS, "tenancy": TENANCY}, "uid-1", status)
    assert entry["throttled"] == {"team-a": "20/20 in flight"}
    pool = pool_from_index({("ns", "shared"): [entry]}, "ns", "shared")
    assert not isinstance(pool, Exception) and getattr(pool, "throttled", None) == {"team-a": "20/20 in flight"}
    # An index function must never raise: whatever the status holds.
    for junk in ({}, {"tenants": "x"}, {"tenants": [1, None, {"throttled": "x"}, {"tenant": 3, "throttled": "y"}]}):
        assert pool_entry({}, "u", junk)["throttled"] == {}


def _stats(pending: int, in_flight: int, succeeded: int = 0) -> JobStats:
    return JobStats(
        total=pending + in_flight + succeeded,
        pending=pending,
        in_flight=in_flight,
        retrying=0,
        succeeded=succeeded,
        dead=0,
        enqueue_done=True,
        suspended=False,
        first_claim_at=NOW.timestamp() - 60 if succeeded or in_flight else None,
    )


@pytest.mark.parametrize("succeeded", [0, 3])  # Queued, and Running with some done
def test_a_job_held_by_its_tenants_quota_waits_in_progress_saying_why(succeeded: int) -> None:
    facts = JobFacts(generation=1, suspend=False, stats=_stats(10, 0, succeeded), tenant_throttled="20/20 in flight")
    status, events = derive_job_status(facts, {}, NOW)
    reconciling = get_condition(status["conditions"], ConditionType.RECONCILING)
    stalled = get_condition(status["conditions"], ConditionType.STALLED)
    assert reconciling is not None and stalled is not None
    # kstatus reads Reconciling=True as InProgress: it proceeds without anyone acting, it is not failed.
    assert (reconciling["status"], reconciling["reason"]) == ("True", "QuotaExceeded")
    assert reconciling["message"] == "its tenant is over a quota of its pool (20/20 in flight): its tasks wait"
    assert stalled["status"] == "False"
    assert status["phase"] == ("Queued" if not succeeded else "Running")
    assert not [e for e in events if e.type == "Warning"]


def test_a_job_with_tasks_in_flight_or_nothing_ready_is_not_shown_held() -> None:
    for stats in (_stats(10, 2), _stats(0, 0, 3)):
        facts = JobFacts(generation=1, suspend=False, stats=stats, tenant_throttled="20/20 in flight")
        status, _ = derive_job_status(facts, {}, NOW)
        reconciling = get_condition(status["conditions"], ConditionType.RECONCILING)
        assert reconciling is not None and reconciling["reason"] != "QuotaExceeded"


def test_a_job_whose_seeds_wait_for_room_in_its_tenants_queue_says_so() -> None:
    waiting = _stats(0, 0)._replace(enqueue_done=False)
    facts = JobFacts(generation=1, suspend=False, stats=waiting, tenant_queue_full="1000/1000 URLs queued")
    status, events = derive_job_status(facts, {}, NOW)
    reconciling = get_condition(status["conditions"], ConditionType.RECONCILING)
    assert reconciling is not None and (reconciling["status"], reconciling["reason"]) == ("True", "QuotaExceeded")
    assert "(1000/1000 URLs queued): its seeds wait" in reconciling["message"]
    assert not [e for e in events if e.type == "Warning"]
    # Once some of its seeds are in (ready or claimed), it is queued or running as usual.
    for stats in (_stats(5, 0)._replace(enqueue_done=False), _stats(0, 2)._replace(enqueue_done=False)):
        facts = JobFacts(generation=1, suspend=False, stats=stats, tenant_queue_full="1000/1000 URLs queued")
        status, _ = derive_job_status(facts, {}, NOW)
        reconciling = get_condition(status["conditions"], ConditionType.RECONCILING)
        assert reconciling is not None and reconciling["reason"] != "QuotaExceeded"


def test_the_job_status_says_the_priority_and_tenant_it_was_registered_with_and_keeps_them() -> None:
    stats = _stats(10, 0)
    first, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats, registered=(1, "team-a")), {}, NOW)
    assert (first["priority"], first["tenant"]) == (1, "team-a")
    later, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats), first, NOW)
    assert (later["priority"], later["tenant"]) == (1, "team-a")
    plain, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats, registered=(5, "")), {}, NOW)
    assert plain["priority"] == 5 and "tenant" not in plain


def test_the_pool_status_counts_the_ready_tasks_a_quota_holds_apart() -> None:
    from trawl.operator.pool.status import signals_status
    from trawl.queue.model import PoolSignals

    signals = PoolSignals(
        ready=3, delayed=0, delayed_due_soon=0, in_flight=2, dead=0, completed_total=0, failed_total=0,
        service_seconds_total=0.0, workers={}, time=0.0, held=40,
    )  # fmt: skip
    queue = signals_status(signals, None)
    assert (queue["ready"], queue["held"]) == (3, 40)
    ScrapePoolStatus.model_validate({"queue": queue})


def test_tenant_series_come_from_the_pool_status() -> None:
    status = {"tenants": tenants_status([_usage("team-a", "inFlight", in_flight=20, claimed_total=900)])}
    metrics.record_pool("ns", "shared", status)
    try:
        collector = metrics._ObjectCollector(clock=lambda: 0.0)
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in collector.collect() for s in f.samples}
    finally:
        metrics.forget_pool("ns", "shared")
    key = (("namespace", "ns"), ("pool", "shared"), ("tenant", "team-a"))
    assert samples[("trawl_tenant_in_flight_tasks", key)] == 20
    assert samples[("trawl_tenant_claims_total", key)] == 900
    assert samples[("trawl_tenant_throttled", (*key[:2], ("reason", "inFlight"), key[2]))] == 1
    assert samples[("trawl_tenant_throttled_seconds", key)] >= 90


def test_trawl_top_shows_each_tenant_and_what_holds_it() -> None:
    rows = tenants_status([_usage("team-a", "inFlight", weight=3, in_flight=20), _usage("team-c")])
    sample = sample_pool({"metadata": {"name": "shared", "namespace": "ns"}, "status": {"tenants": rows}}, 0.0)
    assert [(t.tenant, t.weight, t.in_flight, t.throttled) for t in sample.tenants] == [
        ("team-a", 3, 20, "20/20 in flight"),
        ("team-c", 1, 0, ""),
    ]
    table = tenant_table([sample])
    assert table is not None and [c.header for c in table.columns][:3] == ["POOL", "TENANT", "WEIGHT"]
    assert tenant_table([sample_pool({"metadata": {"name": "p"}, "status": {}}, 0.0)]) is None
