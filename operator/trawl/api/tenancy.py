"""ScrapePool.spec.tenancy: who shares a pool, by what weight, within which quotas and priorities.

The platform (whoever may write ScrapePools) declares the tenants of a pool; a job author only names a
priority class. A job's tenant is its namespace, or the value of a label on its Namespace that the pool
names (``tenantLabel``: set by the platform, never by a job author). Each tenant gets a weight (its share
of claims while several tenants have ready work), quotas the queue enforces at claim time (its daily browser
time: the operator), and a priority ceiling: no job of the tenant runs above it. Priority classes work like
Kubernetes PriorityClasses: named values the platform defines, one of them the global default.

The decisions here are pure (no queue, no Kubernetes): :meth:`TenancySpec.resolve_priority` says what
priority a job gets, or why it is refused, so admission (trawl.jobspec.tenancy) and the tests share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Self

from pydantic import Field, field_validator, model_validator

from .common import DNSLabel, TrawlModel

# What a tenant's priority is when no class says otherwise (the job's priority default before tenancy).
DEFAULT_PRIORITY = 5
DEFAULT_AGING_SECONDS = 300.0
MAX_TENANTS = 1000
MAX_PRIORITY_CLASSES = 32
# A day of browser time for 100,000 pages held at once: any real pool's whole day fits below it.
MAX_BROWSER_SECONDS_PER_DAY = 86400 * 100_000

# A tenant is a namespace's name or a label's value (which every namespace name also is).
TENANT_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
TenantName = Annotated[str, Field(min_length=1, max_length=63, pattern=TENANT_NAME_PATTERN)]
# Names the queue's tenant table keeps for itself (trawl.queue.tenants.check_tenant_name).
RESERVED_TENANT_NAMES = ("aging",)
# A label key as metav1 validates it: an optional DNS-subdomain prefix, then a name of at most 63 characters.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class PriorityClass(TrawlModel):
    """A named priority the platform defines, as a Kubernetes PriorityClass: jobs name it, never its value."""

    name: DNSLabel = Field(description="The name a ScrapeJob's spec.priorityClassName gives.")
    value: int = Field(ge=0, le=9, description="The priority it stands for: 0 (lowest) to 9 (highest).")
    global_default: bool = Field(
        default=False,
        description="The class of a job that names none and whose tenant has no defaultPriorityClass. At most "
        "one class may be the global default.",
    )


class TenantQuotas(TrawlModel):
    """What one tenant may use of the pool, enforced by the queue when tasks are claimed (browserSecondsPerDay:
    by the operator, which holds the tenant's browser jobs). A tenant over a quota waits (its jobs show
    QuotaExceeded), it never fails. Unset: no limit."""

    in_flight: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Tasks the tenant's jobs may have claimed at once."
    )
    requests_per_second: float | None = Field(
        default=None, gt=0, le=100_000, description="Tasks the tenant's jobs may claim per second (every attempt)."
    )
    pages_per_day: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000_000,
        description="Tasks the tenant's jobs may claim per UTC day (every attempt counts).",
    )
    urls_queued: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000_000,
        description="Tasks the tenant's jobs may have waiting (ready or delayed) at once: seeds beyond it stay in "
        "their job's seed stream until there is room, so one tenant's flood cannot fill the pool's Redis. Links a "
        "crawl finds are bounded by its maxPages, not by this. Not enforced on a sharded pool.",
    )
    browser_seconds_per_day: float | None = Field(
        default=None,
        gt=0,
        le=MAX_BROWSER_SECONDS_PER_DAY,
        description="Browser time the tenant's jobs may use per UTC day, in seconds: the wall-clock time a "
        "task of a job with spec.render held a browser page (from opening its context to closing it, failed and "
        "timed-out attempts included), summed over the pool's workers. Enforced by the operator, not at claim "
        "time: once the day's sum reaches the quota, the tenant's jobs with spec.render are held (suspended in "
        "the queue, their spec untouched; condition QuotaExceeded) until 00:00 UTC or until the quota is raised; "
        "its plain jobs run on. A soft bound: tasks already claimed, and those claimed before the operator "
        "learns the sum (about the pool's poll interval, plus a second), still run, so the day may end a few "
        "pages' time over it.",
    )


class TenantTerms(TrawlModel):
    """What the pool grants a tenant: its weight, quotas and priorities."""

    weight: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="The tenant's share of claims while several tenants have ready work (work-conserving: a "
        "tenant with nothing ready leaves its share to the others).",
    )
    priority_ceiling: DNSLabel | None = Field(
        default=None,
        description="A priority class name: no job of the tenant runs above its value (a job asking for more "
        "is refused, reason PriorityAboveCeiling). Default: the pool's jobLimits.maxPriority.",
    )
    default_priority_class: DNSLabel | None = Field(
        default=None,
        description="The class of the tenant's jobs that name none. Default: the global default class, else "
        f"priority {DEFAULT_PRIORITY}; lowered to the ceiling when above it.",
    )
    quotas: TenantQuotas | None = Field(default=None, description="What the tenant may use of the pool.")


class Tenant(TenantTerms):
    """A tenant the pool admits by name, with what it grants it."""

    name: TenantName = Field(
        description="The tenant: the namespace its ScrapeJobs are in, or with tenancy.tenantLabel the label's value."
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_TENANT_NAMES:
            raise ValueError(f"tenant name {value!r} is reserved (the queue's tenant table uses it)")
        return value


@dataclass(frozen=True, slots=True)
class TenancyRefusal:
    """Why a job is not admitted on its pool's tenancy (its tenant, or the priority it named): the condition's
    reason and its message."""

    reason: str
    message: str


class TenancySpec(TrawlModel):
    """The tenants that share the pool, their weights, quotas and priority ceilings, and the priority classes
    their jobs may name."""

    tenant_label: str | None = Field(
        default=None,
        max_length=317,
        pattern=LABEL_KEY_PATTERN,
        description="A label on the job's Namespace whose value names its tenant (e.g. trawl.dev/tenant); a "
        "namespace without it is refused (TenantNotAdmitted). Only the platform may be able to set it: job "
        "authors must not be able to label their Namespace. Default: the namespace is the tenant.",
    )
    aging_seconds: float = Field(
        default=DEFAULT_AGING_SECONDS,
        ge=1,
        le=86400,
        description="A priority level with ready work that no claim served for this long is served first by "
        "the next claim: the lowest class waits at most about this long behind higher ones.",
    )
    priority_classes: list[PriorityClass] | None = Field(
        default=None,
        max_length=MAX_PRIORITY_CLASSES,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="The priority classes the pool's jobs may name (spec.priorityClassName).",
    )
    tenants: list[Tenant] | None = Field(
        default=None,
        max_length=MAX_TENANTS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="The tenants the pool admits by name, with their weight, quotas and priorities.",
    )
    default_tenant: TenantTerms | None = Field(
        default=None,
        description="What a tenant not listed in tenants gets. Absent: jobs of unlisted tenants are refused "
        "(reason TenantNotAdmitted).",
    )

    @field_validator("tenant_label")
    @classmethod
    def _label_key(cls, value: str | None) -> str | None:
        prefix, _, name = (value or "").rpartition("/")
        if len(name) > 63 or len(prefix) > 253:
            raise ValueError(
                f"tenancy.tenantLabel {value!r} is not a valid label key (a prefix of at most 253 "
                f"characters, a name of at most 63)"
            )
        return value

    @field_validator("priority_classes")
    @classmethod
    def _classes(cls, value: list[PriorityClass] | None) -> list[PriorityClass] | None:
        names = [c.name for c in value or []]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"tenancy.priorityClasses names must be unique, repeated: {', '.join(repeated)}")
        defaults = [c.name for c in value or [] if c.global_default]
        if len(defaults) > 1:
            raise ValueError(f"tenancy.priorityClasses: only one class may be globalDefault, not {', '.join(defaults)}")
        return value

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, value: list[Tenant] | None) -> list[Tenant] | None:
        names = [t.name for t in value or []]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"tenancy.tenants names must be unique, repeated: {', '.join(repeated)}")
        return value

    @model_validator(mode="after")
    def _classes_exist(self) -> Self:
        known = {c.name: c.value for c in self.priority_classes or []}
        terms: list[tuple[str, TenantTerms]] = [(f"tenants[{t.name}]", t) for t in self.tenants or []]
        if self.default_tenant is not None:
            terms.append(("defaultTenant", self.default_tenant))
        for where, t in terms:
            named = (("priorityCeiling", t.priority_ceiling), ("defaultPriorityClass", t.default_priority_class))
            for field, name in named:
                if name is not None and name not in known:
                    listed = ", ".join(sorted(known)) or "none"
                    raise ValueError(
                        f"tenancy.{where}.{field} {name!r} is not a class of tenancy.priorityClasses "
                        f"(defined: {listed})"
                    )
            ceiling, default = t.priority_ceiling, t.default_priority_class
            if ceiling is not None and default is not None and known[default] > known[ceiling]:
                raise ValueError(
                    f"tenancy.{where}.defaultPriorityClass {default!r} ({known[default]}) is above its "
                    f"priorityCeiling {ceiling!r} ({known[ceiling]})"
                )
        return self

    def terms_of(self, tenant: str) -> TenantTerms | None:
        """What the pool grants ``tenant``: its entry, else the default tenant's terms, else None (refused)."""
        listed = next((t for t in self.tenants or [] if t.name == tenant), None)
        return listed if listed is not None else self.default_tenant

    def priority_class(self, name: str) -> PriorityClass | None:
        return next((c for c in self.priority_classes or [] if c.name == name), None)

    def global_default(self) -> PriorityClass | None:
        return next((c for c in self.priority_classes or [] if c.global_default), None)

    def resolve_priority(
        self, tenant: str, terms: TenantTerms, *, class_name: str | None, priority: int | None, max_priority: int
    ) -> int | TenancyRefusal:
        """The priority a job of ``tenant`` runs at, or why it is refused.

        What the job author named (a class, or a number) must lie within the tenant's ceiling: above it the
        job is refused, never lowered (the author is told). A class and a number together must agree, as a
        Pod's priority must agree with its priorityClassName. What the job leaves to the platform (the
        tenant's default class, the global default, else DEFAULT_PRIORITY) is lowered to the ceiling.
        ``max_priority``: the pool's jobLimits.maxPriority, the ceiling of a tenant that names none."""
        ceiling_class = self.priority_class(terms.priority_ceiling) if terms.priority_ceiling else None
        ceiling = ceiling_class.value if ceiling_class is not None else max_priority
        ceiling_text = (
            f"its priorityCeiling {ceiling_class.name!r} ({ceiling})"
            if ceiling_class is not None
            else f"the pool's jobLimits.maxPriority ({ceiling})"
        )
        named: int | None = priority
        what = f"spec.priority {priority}"
        if class_name is not None:
            chosen = self.priority_class(class_name)
            if chosen is None:
                listed = ", ".join(c.name for c in self.priority_classes or []) or "none"
                return TenancyRefusal(
                    "PriorityClassNotFound",
                    f"spec.priorityClassName {class_name!r} is not a priority class of the pool (its "
                    f"spec.tenancy.priorityClasses: {listed})",
                )
            if priority is not None and priority != chosen.value:
                return TenancyRefusal(
                    "PriorityConflict",
                    f"spec.priority {priority} disagrees with spec.priorityClassName {class_name!r} "
                    f"({chosen.value}): set one of them",
                )
            named, what = chosen.value, f"spec.priorityClassName {class_name!r} ({chosen.value})"
        if named is not None:
            if named > ceiling:
                return TenancyRefusal(
                    "PriorityAboveCeiling",
                    f"{what} is above what the pool grants tenant {tenant!r}: {ceiling_text}; ask for at most "
                    f"that, or have the platform raise the tenant's ceiling",
                )
            return named
        default_class = (
            self.priority_class(terms.default_priority_class) if terms.default_priority_class else self.global_default()
        )
        return min(default_class.value if default_class is not None else DEFAULT_PRIORITY, ceiling)
