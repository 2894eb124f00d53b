"""Glue between a pool's queue signals and the pure scaling policy in :mod:`trawl.autoscale`.

Keeps, per pool, what the policy needs between calls (the rate tracker and the policy's state) so
the policy itself stays a pure function. Losing it (operator restart) is safe: rates are measured
again and a pending scale-down waits its delay again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from trawl.api.policies import PolitenessSpec, resolve_politeness
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.autoscale.rates import DomainBacklog, rate_limit_ceiling
from trawl.autoscale.step import PoolScalerState, step
from trawl.queue.model import PoolSignals

MAX_HOSTS_PER_JOB = 16


@dataclass(frozen=True, slots=True)
class ScaleAdvice:
    desired: int
    reason: str
    action: str = "Hold"
    throughput: float = 0.0
    failure_rate: float = 0.0
    mean_task_seconds: float = 0.0
    failure_guard: bool = False
    limited: bool = False
    limited_reason: str | None = None


def job_hosts(spec: Mapping[str, Any]) -> list[str] | None:
    """The hosts a job's seeds point at, or None when there are too many to count as rate-limited."""
    hosts: set[str] = set()
    for url in spec.get("urls") or []:
        hosts.add((urlsplit(str(url)).hostname or "").lower())
    for rng in spec.get("urlRanges") or []:
        hosts.add((urlsplit(str(rng.get("template", ""))).hostname or "").lower())
    if not hosts or len(hosts) > MAX_HOSTS_PER_JOB:
        return None
    return sorted(hosts)


def domain_backlog(jobs: Iterable[Mapping[str, Any]], pool: ScrapePoolSpec) -> dict[str, DomainBacklog] | None:
    """Backlog per domain from the pool's active jobs (index entries), with the rate each allows.

    A crawl's discovered links stay on its seeds' hosts unless its scope is SameDomain; jobs whose
    hosts cannot be bounded make the ceiling unbounded (None)."""
    out: dict[str, DomainBacklog] = {}
    defaults = pool.defaults.politeness if pool.defaults else None
    for entry in jobs:
        waiting = int(entry.get("waiting") or 0)
        if waiting <= 0:
            continue
        hosts = entry.get("hosts")
        if not hosts:
            return None
        try:
            pol = resolve_politeness(defaults, PolitenessSpec.model_validate(entry.get("politeness") or {}))
        except ValueError:
            continue
        share = max(1, waiting // len(hosts))
        for host in hosts:
            prev = out.get(host)
            rps = (
                pol.requests_per_second
                if prev is None or prev.requests_per_second is None
                else min(prev.requests_per_second, pol.requests_per_second)
            )
            conc = (
                pol.max_concurrency_per_domain
                if prev is None or prev.max_concurrency is None
                else min(prev.max_concurrency, pol.max_concurrency_per_domain)
            )
            out[host] = DomainBacklog(
                tasks=(prev.tasks if prev else 0) + share, requests_per_second=rps, max_concurrency=conc
            )
    return out


@dataclass
class Autoscalers:
    """Per-pool autoscaler state, keyed by (namespace, name)."""

    states: dict[tuple[str, str], PoolScalerState] = field(default_factory=dict)

    def forget(self, key: tuple[str, str]) -> None:
        self.states.pop(key, None)

    def advise(
        self,
        key: tuple[str, str],
        pool: ScrapePoolSpec,
        signals: PoolSignals,
        current: int,
        now: datetime,
        jobs: Iterable[Mapping[str, Any]] = (),
    ) -> ScaleAdvice:
        state = self.states.get(key)
        backlog = domain_backlog(jobs, pool)
        mean_service = state.rates.rates.mean_service_seconds if state and state.rates else None
        ceiling = (
            rate_limit_ceiling(backlog, mean_service_seconds=mean_service, concurrency=pool.worker.concurrency)
            if backlog
            else None
        )
        result = step(
            pool.autoscaling,
            signals,
            current,
            state,
            concurrency=pool.worker.concurrency,
            drain_seconds=pool.worker.drain_seconds,
            rate_limit_ceiling_replicas=ceiling,
        )
        self.states[key] = result.state
        decision, rates = result.decision, result.rates
        limited_reason = "MaxReplicas" if decision.at_max else ("RateLimited" if decision.rate_limited else None)
        return ScaleAdvice(
            desired=decision.desired,
            reason=decision.reason,
            action=str(decision.action),
            throughput=rates.throughput,
            failure_rate=rates.failure_rate or 0.0,
            mean_task_seconds=rates.mean_service_seconds or 0.0,
            failure_guard=decision.failure_guard,
            limited=decision.limited,
            limited_reason=limited_reason,
        )
