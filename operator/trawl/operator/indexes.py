"""What the operator's in-memory indexes hold per object, and what a reader makes of them (pure).

kopf calls the entry functions for every event. An index function that raises makes kopf drop the
object from the index, and everything that consults the index then believes the object does not
exist (a pool with a running job could be deleted). So these read the raw spec defensively and never
raise on user input; ``pool_from_index`` is where a job or a cron validates the pool it names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trawl.api.common import validation_message
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.api.tenancy import TenancySpec
from trawl.jobspec.tenancy import sharing_refusal
from trawl.operator.job.status import TERMINAL
from trawl.operator.pool.scaling import job_hosts

from .memo import Memo
from .problems import Problem


@dataclass
class PoolRef:
    """A pool as the pool index holds it: its spec, validated, its uid, and the tenants its status last said
    a quota holds back (tenant: the quota's figure), which each job of theirs shows (QuotaExceeded)."""

    spec: ScrapePoolSpec
    uid: str
    throttled: dict[str, str] = field(default_factory=dict)
    # tenant: the figure of its URLs-queued quota, for the tenants whose seeds it stopped (their jobs wait)
    queue_full: dict[str, str] = field(default_factory=dict)
    # tenant: seconds its browser tasks held a browser page this UTC day, as the status said at the pool's
    # last poll (its browserSecondsPerDay holds its browser jobs: trawl.jobspec.tenancy.browser_quota_hold)
    browser_seconds: dict[str, float] = field(default_factory=dict)
    # metadata.generation (None: not known): with the uid it names the spec, so what is derived from the
    # spec alone is kept by it (POOL_SPECS, the job's admission) until the spec changes
    generation: int | None = None


# Validated pool specs by (uid, generation): every job pass of a pool's jobs reads its pool.
POOL_SPECS: Memo[ScrapePoolSpec] = Memo(1024)


def pool_entry(
    spec: Mapping[str, Any], uid: str, status: Mapping[str, Any], generation: int | None = None
) -> dict[str, Any]:
    """A pool as the pool index holds it (read defensively: an index function must never raise)."""
    throttled: dict[str, str] = {}
    queue_full: dict[str, str] = {}
    browser: dict[str, float] = {}
    tenants = status.get("tenants") if isinstance(status, Mapping) else None
    for row in tenants if isinstance(tenants, list) else []:
        if not isinstance(row, Mapping) or not isinstance(row.get("tenant"), str):
            continue
        if row.get("throttled"):
            throttled[row["tenant"]] = str(row.get("throttledMessage") or row["throttled"])
        if row.get("queueFullMessage"):
            queue_full[row["tenant"]] = str(row["queueFullMessage"])
        seconds = row.get("browserSecondsToday")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
            browser[row["tenant"]] = float(seconds)
    return {
        "spec": dict(spec),
        "uid": uid,
        "generation": generation,
        "throttled": throttled,
        "queueFull": queue_full,
        "browser": browser,
    }


def pool_from_index(pool_index: Mapping[Any, Any], namespace: str, name: str) -> PoolRef | Problem:
    """The pool a job or a cron names, or why there is none to use (PoolNotFound, PoolInvalid)."""
    entries = list(pool_index.get((namespace, name), []))
    if not entries:
        return Problem("PoolNotFound", f"ScrapePool {namespace}/{name} does not exist")
    raw = entries[0]
    generation = raw.get("generation")
    generation = generation if isinstance(generation, int) and not isinstance(generation, bool) else None

    def validate() -> ScrapePoolSpec:
        return ScrapePoolSpec.model_validate(raw["spec"])

    try:
        spec = validate() if generation is None else POOL_SPECS.get((raw["uid"], generation), validate)
        return PoolRef(
            spec,
            raw["uid"],
            dict(raw.get("throttled") or {}),
            dict(raw.get("queueFull") or {}),
            dict(raw.get("browser") or {}),
            generation,
        )
    except ValidationError as exc:
        return Problem("PoolInvalid", f"ScrapePool {name} is invalid: {validation_message(exc)}")


def namespace_labels(index: Mapping[Any, Any] | None, namespace: str) -> Mapping[str, str] | None:
    """The labels of ``namespace`` as the Namespace index holds them, None when it does not."""
    entries = list((index or {}).get(namespace, []))
    return entries[0] if entries and isinstance(entries[0], Mapping) else None


def _tenancy(pool_spec: Mapping[str, Any]) -> TenancySpec | None:
    raw = pool_spec.get("tenancy") if isinstance(pool_spec, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    try:
        return TenancySpec.model_validate(dict(raw))
    except ValidationError:  # an invalid pool shares with no one; its own reconcile says why
        return None


def served_jobs(
    entries: Iterable[Mapping[str, Any]],
    pool_namespace: str,
    pool_name: str,
    pool_spec: Mapping[str, Any],
    namespaces: Mapping[Any, Any] | None,
) -> list[Mapping[str, Any]]:
    """The jobs of a pool's ``jobs_by_pool`` entries that the pool serves: those of its own namespace, and
    those of other namespaces its spec.tenancy admits now. Only these hold the pool's deletion and count for
    its autoscaler: any namespace can name any pool, and a job the pool refuses must not keep the platform
    from deleting it, nor scale it."""
    tenancy = _tenancy(pool_spec)
    served = []
    for entry in entries:
        ns = entry.get("namespace") or pool_namespace
        if ns == pool_namespace or (
            tenancy is not None
            and sharing_refusal(ns, pool_namespace, pool_name, tenancy, namespace_labels(namespaces, ns)) is None
        ):
            served.append(entry)
    return served


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def job_pool_key(namespace: str, spec: Mapping[str, Any]) -> tuple[str, Any]:
    """(namespace, name) of the pool a job of ``namespace`` names: its spec.poolNamespace, else its own
    namespace (read defensively, as every index entry)."""
    pool_ns = spec.get("poolNamespace")
    return (pool_ns if isinstance(pool_ns, str) and pool_ns else namespace, spec.get("pool"))


def job_display_name(entry: Mapping[str, Any], pool_namespace: str | None) -> str:
    """A job of a pool's index entry as the pool's messages name it: its name, or namespace/name for a job
    of another namespace than the pool's."""
    ns = entry.get("namespace")
    return f"{ns}/{entry['name']}" if ns and ns != pool_namespace else str(entry["name"])


def pool_index_entry(
    name: str, spec: Mapping[str, Any], status: Mapping[str, Any], *, namespace: str | None = None
) -> dict[str, Any]:
    """A job as its pool sees it: phase, and for the autoscaler's ceiling where waiting work goes."""
    counts = status.get("counts") or {}
    phase = status.get("phase")
    active = phase not in TERMINAL
    politeness = spec.get("politeness")
    return {
        "name": name,
        "namespace": namespace,
        "phase": phase,
        "waiting": _int(counts.get("pending")) + _int(counts.get("retrying")) if active else 0,
        "hosts": job_hosts(spec) if active else None,
        "politeness": dict(politeness) if active and isinstance(politeness, Mapping) else None,
    }


def controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (its ownerReference with controller: true), if any."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            uid = ref.get("uid")
            return str(uid) if uid else None
    return None
