"""Where a pool's waiting work goes, from its jobs, for the rate-limit ceiling.

The controller knows the backlog per job (the jobs-by-pool index: tasks waiting, the hosts of the
job's seeds, its politeness), not per task; the simulator builds the same entries for its traces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from trawl.api.policies import PolitenessSpec, resolve_politeness
from trawl.api.scrapepool import ScrapePoolSpec

from .rates import DomainBacklog

MAX_HOSTS_PER_JOB = 16


def job_hosts(spec: Mapping[str, Any]) -> list[str] | None:
    """The hosts a job's seeds point at, or None when there are too many to count as rate-limited."""
    hosts: set[str] = set()
    ranges = spec.get("urlRanges") or []
    templates = [r.get("template", "") if isinstance(r, Mapping) else "" for r in ranges]
    for url in [*(spec.get("urls") or []), *templates]:
        try:
            hosts.add((urlsplit(str(url)).hostname or "").lower())
        except ValueError:  # e.g. an unclosed IPv6 bracket: its job is InvalidSpec and fetches nothing
            continue
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
