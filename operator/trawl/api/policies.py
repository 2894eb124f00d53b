"""Fetch policies a ScrapeJob sets and a ScrapePool provides defaults for.

Every field is optional on the wire so that a job can override a single field of its pool's
defaults. :func:`resolve_request`, :func:`resolve_politeness` and :func:`resolve_retry` layer built-in
defaults, the pool's defaults and the job's own values into concrete, fully populated settings that the
queue and the workers use.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from .common import TrawlModel
from .domainrules import MAX_DOMAIN_RULES, DomainRule, unique_hosts

# Plain Python, read by the workers without pydantic (trawl.api.plain); exported here as before.
from .plain import DEFAULT_USER_AGENT as DEFAULT_USER_AGENT
from .plain import HARMLESS_HEADERS as HARMLESS_HEADERS
from .plain import PERMANENT_CLASSES as PERMANENT_CLASSES
from .plain import RETRYABLE_BY_DEFAULT as RETRYABLE_BY_DEFAULT
from .plain import BackoffKind as BackoffKind
from .plain import FailureClass as FailureClass


class RequestSpec(TrawlModel):
    """How each page is requested."""

    headers: dict[str, str] | None = Field(
        default=None,
        max_length=64,
        description="Extra HTTP request headers. Hop-by-hop headers and Host are ignored. They go only to the "
        "job's own origins (the scheme, host and port of its urls and urlRanges), in every render mode: not to "
        "another host a crawl reaches, not after a redirect to another origin or from https to http, not to a "
        "page's third-party subresources. A job that sets headers replaces the pool's default headers whole.",
    )
    user_agent: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description=f"User-Agent header. Default: {DEFAULT_USER_AGENT}.",
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=600, description="Total time allowed for one fetch, in seconds. Default: 30."
    )
    connect_timeout_seconds: float | None = Field(
        default=None, gt=0, le=120, description="Time allowed to connect, in seconds. Default: 10."
    )
    max_response_bytes: int | None = Field(
        default=None,
        ge=1,
        le=1 << 30,
        description="Largest body accepted, counted after decompression. Default: 10485760 (10 MiB).",
    )
    max_redirects: int | None = Field(
        default=None, ge=0, le=30, description="Redirects followed before the fetch fails. Default: 10."
    )


class PolitenessSpec(TrawlModel):
    """How gently sites are fetched. Limits are per domain and shared by every worker of the pool."""

    respect_robots_txt: bool | None = Field(
        default=None, description="Obey robots.txt (fetched once per host and cached). Default: true."
    )
    requests_per_second: float | None = Field(
        default=None,
        gt=0,
        le=10000,
        description="Most requests per second sent to one domain by the whole pool. Default: 2.",
    )
    max_concurrency_per_domain: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Most requests in flight to one domain across the pool. Default: 4.",
    )
    adaptive_delay: bool | None = Field(
        default=None,
        description="Slow down for a domain whose latency or error rate grows. Default: true.",
    )
    robots_cache_seconds: int | None = Field(
        default=None, ge=1, le=604800, description="How long a robots.txt is cached. Default: 3600."
    )
    domains: list[DomainRule] | None = Field(
        default=None,
        max_length=MAX_DOMAIN_RULES,
        description="Rules for particular hosts, matched by host pattern (the most specific wins: an exact host "
        "over *.domain, then the longer suffix): their rate, concurrency and headers replace the settings above "
        "for those hosts. A pool's rules bind its jobs: a job's settings and rules may only be stricter for "
        "the hosts a pool rule matches (a lower rate, a lower concurrency, a longer delay). A job that sets "
        "domains keeps the pool's rules and adds its own. Render mode and proxy per domain are not built yet.",
    )

    @field_validator("domains")
    @classmethod
    def _unique_hosts(cls, value: list[DomainRule] | None) -> list[DomainRule] | None:
        unique_hosts(value)
        return value


class RetrySpec(TrawlModel):
    """What happens when a fetch fails."""

    max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Attempts per URL, the first included, before it is dead-lettered. Default: 3.",
    )
    backoff: BackoffKind | None = Field(
        default=None, description="Delay growth between attempts: Fixed or Exponential. Default: Exponential."
    )
    initial_delay_seconds: float | None = Field(
        default=None, ge=0, le=86400, description="Delay before the second attempt, in seconds. Default: 1."
    )
    max_delay_seconds: float | None = Field(
        default=None, ge=0, le=86400, description="Upper bound of any retry delay, in seconds. Default: 300."
    )
    jitter: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Random fraction (0-1) by which a delay is shortened, to spread retries. Default: 0.2.",
    )
    retry_on: list[FailureClass] | None = Field(
        default=None,
        max_length=16,
        description="Failure classes that are retried. Default: Timeout, Connection, HTTP429, HTTP5xx, Stalled.",
    )
    honor_retry_after: bool | None = Field(
        default=None,
        description="Use the server's Retry-After for 429/503 instead of the backoff delay. Default: true.",
    )

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        if (
            self.initial_delay_seconds is not None
            and self.max_delay_seconds is not None
            and self.initial_delay_seconds > self.max_delay_seconds
        ):
            raise ValueError("initialDelaySeconds must not exceed maxDelaySeconds")
        return self


class ResolvedRequest(TrawlModel):
    headers: dict[str, str] = Field(default_factory=dict)
    user_agent: str = DEFAULT_USER_AGENT
    timeout_seconds: float = 30.0
    connect_timeout_seconds: float = 10.0
    max_response_bytes: int = 10 * 1024 * 1024
    max_redirects: int = 10


class ResolvedPoliteness(TrawlModel):
    respect_robots_txt: bool = True
    requests_per_second: float = 2.0
    max_concurrency_per_domain: int = 4
    adaptive_delay: bool = True
    robots_cache_seconds: int = 3600


class ResolvedRetry(TrawlModel):
    max_attempts: int = 3
    backoff: BackoffKind = BackoffKind.EXPONENTIAL
    initial_delay_seconds: float = 1.0
    max_delay_seconds: float = 300.0
    jitter: float = 0.2
    retry_on: list[FailureClass] = Field(default_factory=lambda: list(RETRYABLE_BY_DEFAULT))
    honor_retry_after: bool = True


def _layer(resolved_cls: type[TrawlModel], *layers: TrawlModel | None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        for name in type(layer).model_fields:
            if name not in resolved_cls.model_fields:  # headerOrigins, domains: not resolved here
                continue
            value = getattr(layer, name)
            if value is not None:
                merged[name] = value
    return resolved_cls.model_validate(merged).model_dump()


def resolve_request(*layers: RequestSpec | None) -> ResolvedRequest:
    """Built-in defaults, then each layer in order (pool defaults, then the job)."""
    return ResolvedRequest.model_validate(_layer(ResolvedRequest, *layers))


def resolve_politeness(*layers: PolitenessSpec | None) -> ResolvedPoliteness:
    return ResolvedPoliteness.model_validate(_layer(ResolvedPoliteness, *layers))


def resolve_retry(*layers: RetrySpec | None) -> ResolvedRetry:
    resolved = ResolvedRetry.model_validate(_layer(ResolvedRetry, *layers))
    if resolved.initial_delay_seconds > resolved.max_delay_seconds:
        raise ValueError("retry: initialDelaySeconds must not exceed maxDelaySeconds (after pool defaults)")
    return resolved
