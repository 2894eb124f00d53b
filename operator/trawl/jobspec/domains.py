"""Per-domain politeness rules as a job's workers apply them: what one host gets (pure).

The layers for a request to a host, each overriding the one before where it sets a field:

1. the built-in defaults (lowered to the pool's jobLimits), the pool's ``defaults.politeness``, the job's
   ``politeness``: the job's base politeness (:func:`trawl.jobspec.wire.build_worker_spec`);
2. the most specific pool rule matching the host: the platform's promise to that site. Where it sets the
   rate or the concurrency, the job may only be stricter: its own value (its rule's, else its
   ``politeness``) counts only when lower;
3. the most specific job rule matching the host, where no pool rule sets that field.

Rules match the host of a request's URL without its port (:mod:`trawl.api.domainrules`); the limits
they give are enforced per host (with its port), as every politeness limit is (the pool-wide limiter's
unit, :func:`trawl.worker.urls.host_of`): a ``*.example.com`` rule of 1 request per second gives each
subdomain 1 per second, not 1 shared among them.

The worker spec carries the rules beside the base (``"domains"``, :meth:`DomainRules.to_wire`); a
job's jobLimits and its pool's rules were checked when it was accepted (:func:`rule_problem`), and
:func:`resolve_host` takes the stricter value again, so a rule can never loosen a pool rule.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from trawl.api.plain import HARMLESS_HEADERS, RenderMode

# The rule models are pydantic's: a worker imports them (and pydantic) only for a job that has rules, in the
# functions below; a job without rules, the common case, never does (a worker's start-up, issue 38).
if TYPE_CHECKING:
    from trawl.api.domainrules import DomainRule
    from trawl.api.policies import PolitenessSpec
    from trawl.api.scrapejob import ScrapeJobSpec
    from trawl.api.scrapepool import Ceilings, ScrapePoolSpec

HOST_CACHE_SIZE = 1024  # hosts whose resolution a worker keeps per job (a crawl may reach many)


@dataclass(frozen=True)
class HostPoliteness:
    """What requests to one host get: the rate and concurrency the limiter enforces, the rules' headers."""

    requests_per_second: float
    max_concurrency_per_domain: int
    pool_headers: Mapping[str, str] = field(default_factory=dict)  # the pool rule's: win over the job's
    job_headers: Mapping[str, str] = field(default_factory=dict)
    pool_rule: str | None = None  # the host pattern of the pool rule that applied
    job_rule: str | None = None
    render: RenderMode | None = None  # the rules' render mode (the pool rule's first); None: the job's render
    proxy_group: str | None = None  # the rules' proxy group (the pool rule's first; "none": direct); None: the job's


class DomainRules(NamedTuple):
    """A job's rules and its pool's, with what the job itself asked for (its ``politeness``), which a pool rule
    only lets lower."""

    pool: tuple[DomainRule, ...] = ()
    job: tuple[DomainRule, ...] = ()
    job_rate: float | None = None
    job_concurrency: int | None = None

    @classmethod
    def build(cls, pool: PolitenessSpec | None, job: PolitenessSpec | None) -> DomainRules | None:
        """The rules of a pool's defaults and a job; None when neither has any (the worker's fast path)."""
        pool_rules = tuple(pool.domains or ()) if pool else ()
        job_rules = tuple(job.domains or ()) if job else ()
        if not pool_rules and not job_rules:
            return None
        return cls(
            pool_rules,
            job_rules,
            job.requests_per_second if job else None,
            job.max_concurrency_per_domain if job else None,
        )

    def has_headers(self) -> bool:
        return any(r.headers for r in (*self.pool, *self.job))

    def proxy_groups(self) -> set[str]:
        """The proxy groups the rules name ("none" included)."""
        return {r.proxy_group for r in (*self.pool, *self.job) if r.proxy_group}

    def render_browser(self) -> bool:
        """Whether a rule renders some host's pages in the browser (the pool must run browser workers)."""
        return any(r.render == RenderMode.BROWSER for r in (*self.pool, *self.job))

    def to_wire(self) -> dict[str, Any]:
        return {
            "pool": [r.model_dump(mode="json", exclude_none=True) for r in self.pool],
            "job": [r.model_dump(mode="json", exclude_none=True) for r in self.job],
            "job_rate": self.job_rate,
            "job_concurrency": self.job_concurrency,
        }

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any] | None) -> DomainRules | None:
        if not raw:
            return None
        from trawl.api.domainrules import DomainRule  # pydantic: only for a job with rules

        return cls(
            tuple(DomainRule.model_validate(r) for r in raw.get("pool") or ()),
            tuple(DomainRule.model_validate(r) for r in raw.get("job") or ()),
            raw.get("job_rate"),
            raw.get("job_concurrency"),
        )


def _stricter(promised: float | None, asked: float | None, base: float) -> float:
    """A pool rule's value, lowered to what the job asked where that is lower; else the job's, else the base."""
    if promised is not None:
        return promised if asked is None else min(promised, asked)
    return asked if asked is not None else base


def resolve_host(host: str, base_rate: float, base_concurrency: int, rules: DomainRules) -> HostPoliteness:
    """The politeness of requests to ``host`` (lower-case, no port) for a job whose base politeness is
    ``base_rate`` / ``base_concurrency`` (see the module's doc for the layers)."""
    from trawl.api.domainrules import most_specific  # loaded with the rules (DomainRules.from_wire)

    pool = most_specific(rules.pool, host)
    job = most_specific(rules.job, host)
    job_rate = job.rate() if job is not None and job.rate() is not None else None
    job_conc = job.max_concurrency_per_domain if job is not None else None
    # The job's own politeness is already in the base; a pool rule needs it apart, to lower its promise.
    rate = _stricter(
        pool.rate() if pool else None,
        job_rate if job_rate is not None else rules.job_rate if pool else None,
        base_rate,
    )
    conc = _stricter(
        pool.max_concurrency_per_domain if pool else None,
        job_conc if job_conc is not None else rules.job_concurrency if pool else None,
        base_concurrency,
    )
    return HostPoliteness(
        requests_per_second=rate,
        max_concurrency_per_domain=int(conc),
        pool_headers=dict(pool.headers or {}) if pool else {},
        job_headers=dict(job.headers or {}) if job else {},
        pool_rule=pool.host if pool else None,
        job_rule=job.host if job else None,
        render=(pool.render if pool and pool.render else None) or (job.render if job else None),
        proxy_group=(pool.proxy_group if pool and pool.proxy_group else None) or (job.proxy_group if job else None),
    )


def rule_headers(politeness: HostPoliteness, scheme: str) -> dict[str, str]:
    """The rules' headers a request to an own origin of the job carries: the job rule's, then the pool rule's
    over them (a pool's promise to a site is not the job's to change; names compared case-insensitively).
    A pool rule's headers other than the harmless ones may be credentials: over https only."""
    out = dict(politeness.job_headers)
    for name, value in politeness.pool_headers.items():
        if scheme == "https" or name.lower() in HARMLESS_HEADERS:
            for same in [k for k in out if k.lower() == name.lower()]:
                del out[same]
            out[name] = value
    return out


class HostCache:
    """:func:`resolve_host` memoised per host for one job (bounded: least recently used hosts go first)."""

    def __init__(self, base_rate: float, base_concurrency: int, rules: DomainRules | None) -> None:
        self.base = HostPoliteness(base_rate, base_concurrency)
        self.rules = rules
        self._hosts: OrderedDict[str, HostPoliteness] = OrderedDict()

    def get(self, authority: str) -> HostPoliteness:
        """The politeness for a URL's ``host[:port]``."""
        if self.rules is None:
            return self.base
        from trawl.api.domainrules import host_of_authority  # loaded with the rules (DomainRules.from_wire)

        host = host_of_authority(authority)
        found = self._hosts.get(host)
        if found is not None:
            self._hosts.move_to_end(host)
            return found
        found = resolve_host(host, self.base.requests_per_second, self.base.max_concurrency_per_domain, self.rules)
        self._hosts[host] = found
        if len(self._hosts) > HOST_CACHE_SIZE:
            self._hosts.popitem(last=False)
        return found


def job_rules(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> DomainRules | None:
    """The pool's rules (its defaults.politeness.domains) and the job's, as the job's workers get them."""
    defaults = pool_spec.defaults
    return DomainRules.build(defaults.politeness if defaults else None, job_spec.politeness)


def renders_in_browser(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> bool:
    """Whether some of the job's pages may be rendered in a browser: its render.mode, or a rule's render."""
    if job_spec.render is not None and job_spec.render.browser:
        return True
    rules = job_rules(job_spec, pool_spec)
    return rules is not None and rules.render_browser()


def rule_problem(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """What in the job's domain rules asks for more than its pool allows, or None: a rule above the pool's
    jobLimits, or looser than the pool rule covering its whole pattern. (Where a more specific pool rule
    covers some of a job rule's hosts, the stricter holds there: :func:`resolve_host`.)"""
    from trawl.api.domainrules import most_specific

    rules = job_spec.politeness.domains if job_spec.politeness else None
    if not rules:
        return None
    ceilings = pool_spec.ceilings()
    pool_pol = pool_spec.defaults.politeness if pool_spec.defaults else None
    pool_rules = pool_pol.domains if pool_pol else None
    for i, rule in enumerate(rules):
        where = f"spec.politeness.domains[{i}] ({rule.host})"
        above = _above_limits(rule, ceilings, job_spec.pool)
        if above is not None:
            return f"{where}: {above}"
        promise = most_specific(pool_rules or (), rule.host)
        looser = _looser(rule, promise) if promise is not None else None
        if looser is not None:
            return f"{where}: {looser}"
    return None


def _above_limits(rule: DomainRule, ceilings: Ceilings, pool: str) -> str | None:
    from trawl.api.common import format_number

    rate, conc = rule.rate(), rule.max_concurrency_per_domain
    if rate is not None and rate > ceilings.requests_per_second:
        ceiling, limit = format_number(ceilings.requests_per_second), "requestsPerSecond"
        asked = rule.rate_text()
    elif conc is not None and conc > ceilings.max_concurrency_per_domain:
        ceiling, limit = format_number(ceilings.max_concurrency_per_domain), "maxConcurrencyPerDomain"
        asked = f"maxConcurrencyPerDomain {conc}"
    else:
        return None
    return (
        f"{asked} is above the {ceiling} that ScrapePool {pool!r} allows (its spec.jobLimits.{limit}): ask for at "
        f"most that, or have the pool's owner raise it"
    )


def _looser(rule: DomainRule, promise: DomainRule) -> str | None:
    rate, promised_rate = rule.rate(), promise.rate()
    where = f"the pool's rule for {promise.host} (spec.defaults.politeness.domains)"
    if rate is not None and promised_rate is not None and rate > promised_rate:
        return (
            f"{rule.rate_text()} is looser than {where}, {promise.rate_text()}: a job may only be stricter "
            f"with a host its pool has a rule for (a lower rate or a longer delay)"
        )
    conc, promised_conc = rule.max_concurrency_per_domain, promise.max_concurrency_per_domain
    if conc is not None and promised_conc is not None and conc > promised_conc:
        return (
            f"maxConcurrencyPerDomain {conc} is looser than {where}, maxConcurrencyPerDomain {promised_conc}: a "
            f"job may only be stricter with a host its pool has a rule for (a lower concurrency)"
        )
    return None


def effective_rules(base_rate: float, base_concurrency: int, rules: DomainRules | None) -> list[dict[str, Any]]:
    """The rules as they apply to this job, for its status: one entry per host pattern of the pool's rules
    and the job's, with the rate and concurrency a host matching that pattern (and no more specific one)
    gets, the rules that gave them, and the names of their headers (never the values: a pool's may be a
    credential, and a status is read by more people than the pool's Secrets)."""
    if rules is None:
        return []
    patterns = sorted({r.host for r in (*rules.pool, *rules.job)})
    out = []
    for pattern in patterns:
        # A pattern is its own example host: nothing more specific than itself matches it (matches()).
        got = resolve_host(pattern, base_rate, base_concurrency, rules)
        entry: dict[str, Any] = {
            "host": pattern,
            "requestsPerSecond": round(got.requests_per_second, 6),
            "maxConcurrencyPerDomain": got.max_concurrency_per_domain,
        }
        if got.pool_rule is not None:
            entry["poolRule"] = got.pool_rule
        if got.job_rule is not None:
            entry["jobRule"] = got.job_rule
        if got.render is not None:
            entry["render"] = got.render.value
        names = sorted({*got.job_headers, *got.pool_headers}, key=str.lower)
        if names:
            entry["headerNames"] = names
        out.append(entry)
    return out


def effective_politeness(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a worker spec (:func:`trawl.jobspec.wire.build_worker_spec`) resolved the job's politeness to, for
    its status: the base (hosts no rule matches) and each rule as it applies."""
    base = spec.get("politeness") or {}
    rate = float(base.get("requests_per_second", 2.0))
    conc = int(base.get("max_concurrency_per_domain", 4))
    out: dict[str, Any] = {"requestsPerSecond": rate, "maxConcurrencyPerDomain": conc}
    domains = effective_rules(rate, conc, DomainRules.from_wire(spec.get("domains")))
    if domains:
        out["domains"] = domains
    return out
