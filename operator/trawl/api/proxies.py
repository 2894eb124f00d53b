"""Upstream proxies: named groups on the pool (its author's, trusted), chosen by name in a job (untrusted).

A group's proxy URLs, credentials included, live in a Secret the pool mounts into its workers; a job can
only name a group of its pool, or ``none``, never an address (docs/security.md, "Proxies")."""

from __future__ import annotations

from typing import Self

from pydantic import Field, field_validator, model_validator

from .common import DNSLabel, SecretKeyRef, TrawlModel

NO_PROXY = "none"  # a job's spec.proxy.group meaning: fetch directly, even when the pool has a default group


class ProxyGroup(TrawlModel):
    """A named set of upstream proxies, listed one URL per line in a Secret key."""

    name: DNSLabel = Field(description="The group's name, which jobs give in spec.proxy.group ('none' is reserved).")
    secret_ref: SecretKeyRef = Field(
        description="Secret key holding the group's proxy URLs, one per line: http://user:pass@host:port, "
        "https://... (TLS to the proxy) or socks5://user:pass@host:port. The Secret must be listed in "
        "spec.worker.secrets. Blank lines and lines starting with # are skipped."
    )
    max_concurrency_per_proxy: int = Field(
        default=8, ge=1, le=1024, description="Requests in flight through one proxy of the group, per worker."
    )
    default: bool = Field(
        default=False, description="Jobs that name no group, and no domain rule routes, use this group."
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value == NO_PROXY:
            raise ValueError(f"proxy group name {NO_PROXY!r} is reserved (a job's way to ask for no proxy)")
        return value


class ProxiesSpec(TrawlModel):
    """The pool's upstream proxies."""

    groups: list[ProxyGroup] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Named proxy groups; at most one is the default.",
    )

    @model_validator(mode="after")
    def _unique(self) -> Self:
        names = [g.name for g in self.groups]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"proxies.groups names must be unique, repeated: {', '.join(repeated)}")
        defaults = [g.name for g in self.groups if g.default]
        if len(defaults) > 1:
            raise ValueError(f"at most one proxy group may be the default, not {', '.join(defaults)}")
        return self

    def group(self, name: str) -> ProxyGroup | None:
        return next((g for g in self.groups if g.name == name), None)

    def default_group(self) -> ProxyGroup | None:
        return next((g for g in self.groups if g.default), None)


class ProxyStatus(TrawlModel):
    """One proxy's use and health, as the pool's workers counted them (host:port only, never credentials)."""

    group: str = Field(max_length=63, description="Its group.")
    proxy: str = Field(max_length=261, description="host:port.")
    requests: int = Field(default=0, ge=0, description="Requests through it.")
    ok: int = Field(default=0, ge=0, description="Of which succeeded.")
    failed: int = Field(default=0, ge=0, description="Of which failed (the proxy's fault or the site's).")
    blocked: int = Field(default=0, ge=0, description="Of which a job's session.block rules marked blocked.")
    health: str = Field(
        default="Healthy", max_length=16, description="Healthy, Failing or Blocked: what its latest request was."
    )
    last_outcome: str = Field(default="", max_length=64, description="Its latest request's outcome.")
    last_time: str | None = Field(default=None, max_length=32, description="When (RFC 3339).")


class JobProxy(TrawlModel):
    """Which of its pool's proxy groups a job goes through."""

    group: DNSLabel = Field(
        description="A group of the pool's spec.proxies.groups, or 'none' to fetch directly. A group the pool "
        "does not define is refused when the job is accepted."
    )
