"""Per-domain politeness rules (``politeness.domains``): the model, its host patterns and how a host finds
its rule.

A rule names a host pattern and the politeness that hosts matching it get: a request rate (as
``requestsPerSecond`` or ``delaySeconds``), a concurrency, extra request headers. A pool's rules (in its
``defaults.politeness``) are the platform's promise to those sites: a job's settings and rules may only
be stricter there. How the layers combine for one host is :mod:`trawl.jobspec.domains`.

Host patterns are matched against the host of a request's URL, without its port:

- ``shop.example.com`` matches that host only;
- ``*.example.com`` matches every host below ``example.com`` at any depth (``a.example.com``,
  ``a.b.example.com``), **not** ``example.com`` itself: list both when both are meant.

The most specific matching rule wins: an exact host over any wildcard, then the wildcard with the longer
suffix (``*.shop.example.com`` over ``*.example.com``). Patterns are lower-case ASCII (a name with
other letters is written in its IDNA form, ``xn--...``), with no scheme, port or path. An IP address is
matched as an exact host; a wildcard never matches one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Self

from pydantic import Field, field_validator, model_validator

from .common import DNSLabel, TrawlModel, format_number
from .render import RenderMode

MAX_DOMAIN_RULES = 64
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
HOST_PATTERN = rf"^(?:\*\.)?{_LABEL}(?:\.{_LABEL})*$"
_HOST_RE = re.compile(HOST_PATTERN)


def check_host_pattern(value: str) -> str:
    """``value`` if it is a host pattern (see the module's doc), else ValueError naming what to write."""
    if len(value) > 253 or not _HOST_RE.fullmatch(value):
        hint = _pattern_hint(value)
        raise ValueError(
            f"host {value!r} is not a host pattern: write an exact host (shop.example.com) or *. and a domain "
            f"(*.example.com, which matches its subdomains only), lower case, IDNA-encoded, with no scheme, "
            f"port or path{hint}"
        )
    return value


def _pattern_hint(value: str) -> str:
    """What the author probably meant, when that is plain to see."""
    guess = value.strip().lower()
    for prefix in ("https://", "http://"):
        guess = guess.removeprefix(prefix)
    guess = guess.split("/", 1)[0].rsplit(":", 1)[0] if not guess.startswith("[") else guess
    try:
        star, rest = ("*.", guess[2:]) if guess.startswith("*.") else ("", guess)
        guess = star + rest.encode("idna").decode("ascii")
    except UnicodeError:
        return ""
    return f" (did you mean {guess!r}?)" if guess != value and _HOST_RE.fullmatch(guess) else ""


def is_wildcard(pattern: str) -> bool:
    return pattern.startswith("*.")


def matches(pattern: str, host: str) -> bool:
    """Whether ``pattern`` matches ``host`` (lower-case, without port). ``host`` may itself be a wildcard
    pattern: then whether ``pattern`` matches every host that one does (``*.example.com`` covers
    ``*.shop.example.com``; an exact host covers no wildcard)."""
    if not is_wildcard(pattern):
        return pattern == host
    return host.endswith(pattern[1:]) and not _is_ip(host)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def specificity(pattern: str) -> tuple[int, int]:
    """Sort key: higher is more specific (exact over wildcard, then the longer suffix)."""
    return (0 if is_wildcard(pattern) else 1, len(pattern))


def host_of_authority(authority: str) -> str:
    """The host a rule is matched against, from ``host[:port]`` (lower-case, no final dot)."""
    host = authority.lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return host.rstrip(".")


class DomainRule(TrawlModel):
    """Politeness for the hosts one pattern matches, how their pages load and through which proxy group.
    Unset fields keep what the host would get without the rule."""

    host: str = Field(
        min_length=1,
        max_length=253,
        pattern=HOST_PATTERN,
        description="Hosts the rule is for: an exact host (shop.example.com) or *. and a domain (*.example.com: "
        "every host below example.com at any depth, not example.com itself). Lower case, IDNA-encoded "
        "(xn--...), no scheme, port or path. A host takes its most specific rule: exact over wildcard, then the "
        "longer suffix.",
    )
    requests_per_second: float | None = Field(
        default=None,
        gt=0,
        le=10000,
        description="Most requests per second each matching host receives from the whole pool (each host "
        "apart, not all of them together). Set this or delaySeconds.",
    )
    delay_seconds: float | None = Field(
        default=None,
        ge=0.0001,  # requestsPerSecond's 10000
        le=86400,
        description="Least time between two requests to each matching host from the whole pool: the same limit "
        "as requestsPerSecond 1/delaySeconds, written the way a site's terms often say it. Set this or "
        "requestsPerSecond.",
    )
    max_concurrency_per_domain: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Most requests in flight to each matching host across the pool.",
    )
    headers: dict[str, str] | None = Field(
        default=None,
        max_length=64,
        description="Extra HTTP request headers for the matching hosts, sent only where the job's own headers "
        "go (its own origins: the scheme, host and port of its urls and urlRanges). A pool rule's headers "
        "win over the job's of the same name; those other than the harmless content-negotiation ones are "
        "sent over https only.",
    )

    render: RenderMode | None = Field(
        default=None,
        description="How the matching hosts' pages load: Browser (headless Chromium, with the job's render "
        "settings or their defaults; the pool must run browser workers) or Fetch (plain HTTP, even in a job whose "
        "render.mode is Browser). Unset: as the job's render says. A pool rule's render wins over a job rule's.",
    )

    proxy_group: DNSLabel | None = Field(
        default=None,
        description="The pool's proxy group (spec.proxies.groups) the matching hosts' requests go through, or "
        "'none' to fetch them directly: over the job's spec.proxy and the pool's default group. A group the "
        "pool does not define is refused when the job is accepted. A pool rule's group wins over a job rule's.",
    )

    @field_validator("host", mode="before")
    @classmethod
    def _host_pattern(cls, value: object) -> object:
        return check_host_pattern(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_rate(self) -> Self:
        if self.requests_per_second is not None and self.delay_seconds is not None:
            raise ValueError(f"domain rule {self.host}: set requestsPerSecond or delaySeconds, not both")
        if (
            self.rate() is None
            and self.max_concurrency_per_domain is None
            and not self.headers
            and not self.render
            and not self.proxy_group
        ):
            raise ValueError(
                f"domain rule {self.host} sets nothing: give requestsPerSecond, delaySeconds, "
                "maxConcurrencyPerDomain, proxyGroup, headers or render"
            )
        return self

    def rate(self) -> float | None:
        """The rule's request rate, however it is written; None when it sets none."""
        if self.delay_seconds is not None:
            return 1.0 / self.delay_seconds
        return self.requests_per_second

    def rate_text(self) -> str:
        """How the rule wrote its rate, for messages."""
        if self.delay_seconds is not None:
            return (
                f"delaySeconds {format_number(self.delay_seconds)} ({1.0 / self.delay_seconds:.4g} requests per second)"
            )
        return f"requestsPerSecond {format_number(self.requests_per_second or 0)}"


# The API server's side of DomainRule._one_rate (the "sets nothing" case is the operator's to refuse).
ONE_RATE_RULE = {
    "rule": "!(has(self.requestsPerSecond) && has(self.delaySeconds))",
    "message": "set requestsPerSecond or delaySeconds, not both",
}


def unique_hosts(rules: Sequence[DomainRule] | None) -> Sequence[DomainRule] | None:
    """``rules`` if no host pattern is listed twice, else ValueError naming it."""
    seen: set[str] = set()
    for rule in rules or ():
        if rule.host in seen:
            raise ValueError(f"domains: host {rule.host} is listed twice (one rule per host pattern)")
        seen.add(rule.host)
    return rules


def most_specific(rules: Iterable[DomainRule], host: str) -> DomainRule | None:
    """The rule of ``rules`` that ``host`` takes (see :func:`matches`), or None when none matches."""
    best: DomainRule | None = None
    for rule in rules:
        if matches(rule.host, host) and (best is None or specificity(rule.host) > specificity(best.host)):
            best = rule
    return best
