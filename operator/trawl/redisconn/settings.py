"""A pool's Redis connection settings, resolved (Secrets read), and the client made from them.

The operator resolves them from the pool's spec and its Secret index, the CLI from the pool's spec and
the Secrets it may read; both make their client here, so every process reaches a pool's Redis the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from trawl.api.scrapepool import ScrapePoolSpec

from .client import connect
from .sentinel import SentinelTarget


class RedisConfigError(Exception):
    """The pool's Redis settings cannot be resolved (missing Secret or key)."""


class RedisUnreachable(Exception):
    """Redis did not answer."""


@dataclass(frozen=True)
class ResolvedRedis:
    url: str
    password: str | None
    tls: bool
    insecure: bool
    ca_pem: str | None
    cluster: bool = False
    sentinel: SentinelTarget | None = None  # mode Sentinel: the master is found through these (url unused)

    @property
    def safe_target(self) -> str:
        if self.sentinel is not None:
            return self.sentinel.display
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port or 6379}"

    @property
    def fingerprint(self) -> str:
        raw = "\0".join(
            [self.url, self.password or "", str(self.tls), str(self.insecure), self.ca_pem or "", str(self.cluster)]
            + ([repr(self.sentinel)] if self.sentinel is not None else [])
        )
        return hashlib.sha256(raw.encode()).hexdigest()


def sentinel_target(spec: ScrapePoolSpec, password: str | None) -> SentinelTarget:
    """Where a mode Sentinel pool's master is found (``password``: the Sentinels' own)."""
    redis = spec.redis
    assert redis.sentinels is not None and redis.master_name is not None  # the model's validator
    return SentinelTarget.parse(redis.sentinels, redis.master_name, password)


def make_client(cfg: ResolvedRedis, **extra: Any) -> aioredis.Redis:
    """A single-server, cluster (``cfg.cluster``) or Sentinel-managed (``cfg.sentinel``) client with the
    pool's password and TLS."""
    kwargs: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 10, "health_check_interval": 30}
    kwargs.update(extra)
    return connect(
        cfg.url,
        cluster=cfg.cluster,
        password=cfg.password,
        tls=cfg.tls,
        insecure=cfg.insecure,
        ca_pem=cfg.ca_pem,
        sentinel=cfg.sentinel,
        **kwargs,
    )
