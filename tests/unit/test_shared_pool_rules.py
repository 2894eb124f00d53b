"""Issue 33, a pool shared between namespaces (ScrapeJob spec.poolNamespace): which namespaces a pool serves
(its spec.tenancy must admit the job's tenant), which Secrets the operator reads for a job of another
namespace (its pool's, never one the job's author chooses), and how the indexes, the cron and the CLI follow
the pool's namespace. tests/cluster/test_shared_pool.py runs it as tenants against a real API server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from trawl.api.common import SecretKeyRef
from trawl.api.cronscrapejob import CronScrapeJobSpec
from trawl.api.scrapejob import OnCompleteSpec, ScrapeJobSpec
from trawl.api.tenancy import TenancySpec
from trawl.clitools.output import job_pool_label
from trawl.clitools.pooldelete import jobs_naming
from trawl.clitools.queueaccess import job_ref
from trawl.clitools.submit import SubmitOptions, build_job, job_pool_namespace
from trawl.jobspec.tenancy import pool_namespace, sharing_refusal
from trawl.operator.cron.reconcile import build_job as cron_job
from trawl.operator.cron.reconcile import template_pool_problem
from trawl.operator.indexes import job_display_name, job_pool_key, pool_entry, pool_index_entry, served_jobs
from trawl.operator.job.oncomplete import run_hooks
from trawl.operator.job.reconcile import reconcile_job
from trawl.operator.job.sinkcheck import finish_sink
from trawl.operator.secrets import SecretNotFound
from trawl.redisconn.settings import RedisUnreachable

REDIS = {"url": "redis://r:6379/0"}
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
SHARED: dict[str, Any] = {"tenants": [{"name": "team-a", "weight": 3}, {"name": "team-b", "weight": 1}]}


def _tenancy(raw: dict[str, Any] | None = SHARED) -> TenancySpec | None:
    return TenancySpec.model_validate(raw) if raw is not None else None


def test_a_pool_serves_its_own_namespace_without_tenancy() -> None:
    assert sharing_refusal("shop", "shop", "default", None) is None


def test_a_pool_without_tenancy_serves_no_other_namespace() -> None:
    refusal = sharing_refusal("team-a", "platform", "shared", None)
    assert refusal is not None and refusal.reason == "PoolNotShared"
    assert "ScrapePool platform/shared serves only its own namespace" in refusal.message


def test_a_shared_pool_serves_the_tenants_its_tenancy_admits() -> None:
    assert sharing_refusal("team-a", "platform", "shared", _tenancy()) is None
    assert sharing_refusal("team-b", "platform", "shared", _tenancy()) is None
    refusal = sharing_refusal("team-x", "platform", "shared", _tenancy())
    assert refusal is not None and refusal.reason == "PoolNotShared"
    assert "must admit tenant 'team-x'" in refusal.message
    # A namespace the pool does not serve learns nothing of the tenants it does.
    assert "team-a" not in refusal.message and "team-b" not in refusal.message
    # A defaultTenant admits every namespace.
    assert sharing_refusal("team-x", "platform", "shared", _tenancy({**SHARED, "defaultTenant": {}})) is None


def test_with_a_tenant_label_the_namespace_label_names_the_tenant() -> None:
    tenancy = _tenancy({**SHARED, "tenantLabel": "trawl.dev/tenant"})
    assert sharing_refusal("ns-1", "platform", "shared", tenancy, {"trawl.dev/tenant": "team-a"}) is None
    # A namespace named after a tenant is not that tenant without the label the platform sets.
    refusal = sharing_refusal("team-a", "platform", "shared", tenancy, {})
    assert refusal is not None and refusal.reason == "PoolNotShared" and "has no label" in refusal.message


def test_pool_namespace_defaults_to_the_jobs() -> None:
    spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://a.example/"]})
    assert pool_namespace("team-a", spec) == "team-a"
    shared = spec.model_copy(update={"pool_namespace": "platform"})
    assert pool_namespace("team-a", shared) == "platform"


def test_jobs_are_indexed_under_their_pools_namespace() -> None:
    assert job_pool_key("team-a", {"pool": "shared", "poolNamespace": "platform"}) == ("platform", "shared")
    assert job_pool_key("team-a", {"pool": "own"}) == ("team-a", "own")
    # Read defensively: an index function must never raise on what a job author wrote.
    assert job_pool_key("team-a", {"pool": "own", "poolNamespace": 7}) == ("team-a", "own")
    entry = pool_index_entry("j1", {"pool": "shared"}, {}, namespace="team-a")
    assert job_display_name(entry, "platform") == "team-a/j1"
    assert job_display_name(entry, "team-a") == "j1"


def test_only_jobs_the_pool_serves_hold_its_deletion_and_scale_it() -> None:
    entries = [
        pool_index_entry("own", {}, {}, namespace="platform"),
        pool_index_entry("a", {}, {}, namespace="team-a"),
        pool_index_entry("x", {}, {}, namespace="team-x"),
    ]
    served = served_jobs(entries, "platform", "shared", {"tenancy": SHARED}, None)
    assert [e["name"] for e in served] == ["own", "a"]
    # A pool without tenancy (or with an invalid one) serves only its own namespace.
    assert [e["name"] for e in served_jobs(entries, "platform", "shared", {}, None)] == ["own"]
    bad = {"tenancy": {"tenants": [{"name": "a"}, {"name": "a"}]}}
    assert [e["name"] for e in served_jobs(entries, "platform", "shared", bad, None)] == ["own"]


def _pool_index(tenancy: dict[str, Any] | None) -> dict[Any, Any]:
    spec = {"redis": REDIS, **({"tenancy": tenancy} if tenancy is not None else {})}
    return {("platform", "shared"): [pool_entry(spec, "pool-uid", {})]}


def test_the_cron_of_a_namespace_the_pool_does_not_serve_creates_no_jobs() -> None:
    job = ScrapeJobSpec.model_validate({"pool": "shared", "poolNamespace": "platform", "urls": ["https://a.example/"]})
    assert template_pool_problem(_pool_index(SHARED), "team-a", job) is None
    problem = template_pool_problem(_pool_index(None), "team-a", job)
    assert problem is not None and problem.reason == "PoolNotShared"
    assert "no jobs are created" in problem.message
    missing = template_pool_problem({}, "team-a", job)
    assert missing is not None and missing.reason == "PoolNotFound" and "platform/shared" in missing.message
    # The jobs the cron creates name the same shared pool.
    cron = CronScrapeJobSpec.model_validate(
        {"schedule": "@hourly", "jobTemplate": {"spec": job.model_dump(mode="json", by_alias=True, exclude_none=True)}}
    )
    assert cron_job("c", "uid", cron, NOW)["spec"]["poolNamespace"] == "platform"


class _Connections:
    """Records which pool the operator connects to; its Redis never answers."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def for_pool(self, namespace: str, name: str, *_: Any) -> Any:
        self.asked.append((namespace, name))
        raise RedisUnreachable("unreachable")


async def _reconcile(job_ns: str, spec: dict[str, Any], tenancy: dict[str, Any] | None) -> tuple[Any, _Connections]:
    connections = _Connections()
    outcome = await reconcile_job(
        name="j",
        namespace=job_ns,
        uid="uid-1",
        generation=1,
        spec_raw=spec,
        status={},
        annotations={},
        pool_index=_pool_index(tenancy),
        connections=connections,  # type: ignore[arg-type]
        now=NOW,
    )
    return outcome, connections


def _stalled(outcome: Any) -> tuple[str, str]:
    cond = next(c for c in outcome.status["conditions"] if c["type"] == "Stalled")
    return cond["reason"], cond["message"]


async def test_a_job_uses_the_pool_of_its_pool_namespace() -> None:
    spec = {"pool": "shared", "poolNamespace": "platform", "urls": ["https://a.example/"]}
    outcome, connections = await _reconcile("team-a", spec, SHARED)
    assert connections.asked == [("platform", "shared")]
    assert _stalled(outcome)[0] == "RedisUnavailable"


async def test_a_job_the_pool_does_not_serve_is_refused_without_its_settings() -> None:
    # The job names a Secret the pool does not mount: a job the pool serves is told so; one it does not
    # serve is told only that (the pool's Secrets, limits and browsers are not its business).
    spec = {
        "pool": "shared",
        "poolNamespace": "platform",
        "urls": ["https://a.example/"],
        "output": {"sink": "Webhook", "webhook": {"url": "https://h.example/", "secretRef": {"name": "s", "key": "k"}}},
    }
    outcome, _ = await _reconcile("team-x", spec, SHARED)
    reason, message = _stalled(outcome)
    assert reason == "PoolNotShared" and "tenant 'team-x'" in message
    assert outcome.events and outcome.events[0].reason == "PoolNotShared"
    served, _ = await _reconcile("team-a", spec, SHARED)
    assert _stalled(served)[0] == "SecretNotMounted"
    unshared, _ = await _reconcile("team-a", spec, None)
    assert _stalled(unshared)[0] == "PoolNotShared"
    assert "platform/shared serves only its own namespace" in _stalled(unshared)[1]


class _Reader:
    def __init__(self) -> None:
        self.namespaces: list[str] = []

    async def __call__(self, namespace: str, ref: SecretKeyRef) -> str:
        self.namespaces.append(namespace)
        raise SecretNotFound("no")


async def test_the_operator_reads_a_jobs_secrets_in_its_pools_namespace() -> None:
    spec = ScrapeJobSpec.model_validate(
        {
            "pool": "shared",
            "poolNamespace": "platform",
            "urls": ["https://a.example/"],
            "output": {
                "sink": "S3",
                "s3": {
                    "endpoint": "https://s3.example",
                    "bucket": "results",
                    "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
                    "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
                },
            },
        }
    )
    reader = _Reader()
    done = await finish_sink("team-a", "j", "uid", spec, {"phase": "Succeeded"}, reader, secret_namespace="platform")
    assert "manifestError" in done and reader.namespaces == ["platform"]
    webhook = {"url": "https://h.example/", "secretRef": {"name": "s", "key": "k"}}
    hooks = OnCompleteSpec.model_validate({"webhook": webhook})
    reader = _Reader()
    out = await run_hooks(
        namespace="team-a",
        name="j",
        uid="uid",
        spec=hooks,
        pool=None,  # type: ignore[arg-type]  # a webhook alone never reads the pool
        pool_name="shared",
        status={"phase": "Succeeded"},
        prev=None,
        allowed=(),
        now=NOW,
        read_secret=reader,
        secret_namespace="platform",
    )
    assert out["webhook"]["state"] == "Pending" and reader.namespaces == ["platform"]


def test_the_cli_submits_to_a_shared_pool_and_shows_it() -> None:
    body = build_job(SubmitOptions(["https://a.example/"], pool="shared", pool_namespace="platform"))
    assert body["spec"]["poolNamespace"] == "platform"
    job = {"metadata": {"namespace": "team-a", "name": "j", "uid": "u"}, "spec": body["spec"]}
    assert job_pool_namespace(job) == "platform"
    assert job_pool_label(job) == "platform/shared"
    assert job_pool_label({"metadata": {"namespace": "x"}, "spec": {"pool": "p"}}) == "p"
    pool = {"metadata": {"namespace": "platform", "name": "shared"}, "spec": {"redis": REDIS}}
    assert job_ref(job, pool).prefix.startswith("trawl:{platform/shared}")
    jobs = [
        {"metadata": {"name": "own", "namespace": "platform"}, "spec": {"pool": "shared"}},
        {"metadata": {"name": "other", "namespace": "platform"}, "spec": {"pool": "shared", "poolNamespace": "x"}},
    ]
    assert jobs_naming("shared", jobs, "platform") == ["own"]


@pytest.mark.parametrize("value", ["Platform", "-x", "a" * 64])
def test_pool_namespace_is_a_namespace_name(value: str) -> None:
    with pytest.raises(ValueError):
        ScrapeJobSpec.model_validate({"pool": "p", "poolNamespace": value, "urls": ["https://a.example/"]})
