"""A job's tenant and priority on its pool, and the pool's tenant table for the queue (pure).

The platform declares the pool's tenants (ScrapePool.spec.tenancy); the job author only names a priority
class. A job's tenant is its namespace, or the value of the Namespace label the pool names (tenantLabel):
either way nothing the job author writes in the job chooses it. Admission asks :func:`place_job`; the
pool's reconcile writes :func:`tenant_policy` to the queue on every poll, so claims share the pool by
weight and stop at each tenant's quotas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.api.tenancy import TenancyRefusal, TenancySpec, TenantTerms
from trawl.queue.model import TenantLimits, TenantPolicy
from trawl.queue.tenants import check_tenant_name


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job runs among the pool's tenants: its tenant and the priority it was granted."""

    tenant: str
    priority: int


def tenant_of(namespace: str, tenancy: TenancySpec, labels: Mapping[str, str] | None) -> str | TenancyRefusal:
    """A job's tenant: its namespace, or with ``tenancy.tenantLabel`` that label's value on its Namespace
    (``labels``: the Namespace's labels, None when the operator does not see it). A namespace without the
    label is refused, never taken as a tenant of its own name (a team that may create namespaces could
    otherwise name one after another tenant)."""
    tenant = namespace
    if tenancy.tenant_label is not None:
        value = (labels or {}).get(tenancy.tenant_label)
        if not value:
            return TenancyRefusal(
                "TenantNotAdmitted",
                f"namespace {namespace!r} has no label {tenancy.tenant_label}, which names the tenant on this "
                f"pool: ask the platform to label the namespace",
            )
        tenant = value
    try:
        return check_tenant_name(tenant)
    except ValueError:
        return TenancyRefusal("TenantNotAdmitted", f"{tenant!r} cannot be a tenant's name on this pool")


def pool_namespace(namespace: str, job: ScrapeJobSpec) -> str:
    """The namespace of the pool a job in ``namespace`` names: its spec.poolNamespace, else its own."""
    return job.pool_namespace or namespace


def sharing_refusal(
    namespace: str,
    pool_ns: str,
    pool_name: str,
    tenancy: TenancySpec | None,
    labels: Mapping[str, str] | None = None,
) -> TenancyRefusal | None:
    """Why a pool in another namespace does not serve a job of ``namespace`` (reason PoolNotShared), or None.

    A pool serves its own namespace as ever. It serves another namespace's jobs only when its author (the
    platform) said so in spec.tenancy and that tenancy admits the job's tenant: listed by name, or any tenant
    when there is a defaultTenant. A pool without tenancy serves only its own namespace, so no team can put
    work on another team's pool (its workers, Secrets and egress) by naming it. The tenant is derived as on
    the pool's own namespace (:func:`tenant_of`): nothing the job author writes chooses it."""
    if pool_ns == namespace:
        return None
    where = f"ScrapePool {pool_ns}/{pool_name}"
    if tenancy is None:
        return TenancyRefusal(
            "PoolNotShared",
            f"{where} serves only its own namespace: it has no spec.tenancy, so it admits no tenant of namespace "
            f"{namespace!r}; use a pool of this namespace, or ask the platform to share the pool",
        )
    tenant = tenant_of(namespace, tenancy, labels)
    if isinstance(tenant, TenancyRefusal):
        return TenancyRefusal("PoolNotShared", f"{where} is not shared with namespace {namespace!r}: {tenant.message}")
    if tenancy.terms_of(tenant) is None:
        return TenancyRefusal(
            "PoolNotShared",
            f"{where} serves only its own namespace and the tenants its spec.tenancy admits; its spec.tenancy "
            f"must admit tenant {tenant!r} (namespace {namespace!r}): list it, or set a defaultTenant",
        )
    return None


def place_job(
    namespace: str, job: ScrapeJobSpec, pool: ScrapePoolSpec, labels: Mapping[str, str] | None = None
) -> Placement | TenancyRefusal | None:
    """The job's tenant and priority on a pool with tenancy; why it is refused (TenantNotAdmitted, a priority
    class it may not use); None on a pool without tenancy (the job's own priority, within jobLimits).
    ``labels``: the labels of the job's Namespace (read only when the pool names a tenantLabel)."""
    tenancy = pool.tenancy
    if tenancy is None:
        if job.priority_class_name is not None:
            return TenancyRefusal(
                "PriorityClassNotFound",
                f"spec.priorityClassName {job.priority_class_name!r}: ScrapePool {job.pool!r} defines no priority "
                f"classes (no spec.tenancy); use spec.priority",
            )
        return None
    tenant = tenant_of(namespace, tenancy, labels)
    if isinstance(tenant, TenancyRefusal):
        return tenant
    terms = tenancy.terms_of(tenant)
    if terms is None:
        listed = ", ".join(t.name for t in tenancy.tenants or []) or "none"
        source = "the job's namespace" if tenancy.tenant_label is None else f"its namespace's {tenancy.tenant_label}"
        return TenancyRefusal(
            "TenantNotAdmitted",
            f"tenant {tenant!r} ({source}) is not admitted to ScrapePool {job.pool!r}: the pool's "
            f"spec.tenancy lists tenants {listed} and has no defaultTenant; ask the platform to add the tenant",
        )
    priority = tenancy.resolve_priority(
        tenant,
        terms,
        class_name=job.priority_class_name,
        priority=job.priority,
        max_priority=pool.ceilings().max_priority,
    )
    if isinstance(priority, TenancyRefusal):
        return priority
    return Placement(tenant, priority)


def tenant_limits(terms: TenantTerms) -> TenantLimits:
    quotas = terms.quotas
    return TenantLimits(
        weight=terms.weight,
        max_in_flight=quotas.in_flight if quotas is not None else None,
        requests_per_second=quotas.requests_per_second if quotas is not None else None,
        pages_per_day=quotas.pages_per_day if quotas is not None else None,
        max_queued=quotas.urls_queued if quotas is not None else None,
        browser_seconds_per_day=quotas.browser_seconds_per_day if quotas is not None else None,
    )


def browser_quota_of(tenancy: TenancySpec | None, tenant: str) -> float | None:
    """The tenant's browserSecondsPerDay on a pool with this tenancy (None: no such quota)."""
    terms = tenancy.terms_of(tenant) if tenancy is not None else None
    return terms.quotas.browser_seconds_per_day if terms is not None and terms.quotas is not None else None


def browser_quota_hold(*, renders: bool, quota: float | None, used_today: float) -> str:
    """Whether a job is held by its tenant's daily browser time, as the quota's figure for its status
    ("browserSecondsPerDay: 3,612/3,600 s today"), or "" when it is not.

    Only a job that renders (spec.render) is held, once the tenant's browser time this UTC day reached the
    quota; the tenant's plain jobs run on. The operator enforces it, not the claim script (which would have to
    skip the tenant's browser jobs inside its ring): the job is suspended in the queue, never in its spec, and
    resumed when the day's sum is reset (00:00 UTC) or the quota is raised or removed. The hold comes a little
    late by nature: tasks already claimed finish, and others are claimed until the operator sees the sum."""
    if not renders or quota is None or used_today < quota:
        return ""
    return f"browserSecondsPerDay: {_figure(used_today)}/{_figure(quota)} s today"


def over_browser_quota(tenancy: TenancySpec | None, usage: Mapping[str, float]) -> set[str]:
    """The tenants (of ``usage``: tenant -> browser seconds today) whose browser time reached their quota."""
    return {
        tenant
        for tenant, used in usage.items()
        if browser_quota_hold(renders=True, quota=browser_quota_of(tenancy, tenant), used_today=used)
    }


def _figure(seconds: float) -> str:
    """Whole seconds with thousands separators; a fraction only for a quota under a few seconds."""
    return f"{seconds:,.0f}" if seconds >= 10 or seconds == int(seconds) else f"{seconds:,.1f}"


def tenant_policy(tenancy: TenancySpec | None) -> TenantPolicy:
    """The pool's tenant table as the claim script reads it. Without tenancy: no tenants, every limit off (so
    a pool that drops its tenancy lifts the quotas it set). An unlisted tenant without a defaultTenant never
    gets a job registered; the table's default then only covers jobs registered before the change."""
    if tenancy is None:
        return TenantPolicy()
    default = tenant_limits(tenancy.default_tenant) if tenancy.default_tenant is not None else TenantLimits()
    return TenantPolicy(
        tenants={t.name: tenant_limits(t) for t in tenancy.tenants or []},
        default=default,
        aging_seconds=tenancy.aging_seconds,
    )
