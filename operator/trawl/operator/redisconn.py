"""Redis clients for pools, built from the pool's spec and Secrets, cached per connection settings.

Credentials are read from Secrets by name (never listed), kept only in memory, and never logged
or written to a status: errors are reported with the host and port only.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trawl.api.common import SecretKeyRef
from trawl.api.scrapepool import RedisMode, ScrapePoolSpec, redis_url_problem
from trawl.redisclient import connect

from . import kube

log = logging.getLogger(__name__)


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

    @property
    def safe_target(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port or 6379}"

    @property
    def fingerprint(self) -> str:
        raw = "\0".join(
            [self.url, self.password or "", str(self.tls), str(self.insecure), self.ca_pem or "", str(self.cluster)]
        )
        return hashlib.sha256(raw.encode()).hexdigest()


SECRET_CACHE_SECONDS = 30.0


class SecretCache:
    """Secret data by (namespace, name), kept for a bounded time.

    Every active job reconciles about once a second and each needs its pool's Redis settings; reading
    the Secret from the API server each time would be one GET per job per second. A rotated Secret
    reaches the operator within SECRET_CACHE_SECONDS; a missing one is not cached (so creating it
    takes effect on the next pass). Only the names the pools reference are read: no list, no watch
    of every Secret in the namespace (which would need wider RBAC and hold them all in memory)."""

    def __init__(self, ttl: float = SECRET_CACHE_SECONDS) -> None:
        self.ttl = ttl
        self._data: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}

    async def get(self, namespace: str, name: str) -> dict[str, str]:
        now = time.monotonic()
        hit = self._data.get((namespace, name))
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        try:
            secret = await kube.call(kube.core().read_namespaced_secret, name, namespace)
        except Exception as exc:
            self._data.pop((namespace, name), None)
            if kube.is_status(exc, 404):
                raise RedisConfigError(f"Secret {namespace}/{name} not found") from None
            if kube.is_status(exc, 403):
                raise RedisConfigError(f"not allowed to read Secret {namespace}/{name}") from None
            raise RedisConfigError(f"cannot read Secret {namespace}/{name}: {kube.api_message(exc)}") from None
        data = {str(k): str(v) for k, v in (secret.data or {}).items()}
        self._data[(namespace, name)] = (now, data)
        return data

    def forget(self, namespace: str, name: str) -> None:
        self._data.pop((namespace, name), None)


secrets = SecretCache()


async def _secret_value(namespace: str, ref: SecretKeyRef) -> str:
    data = await secrets.get(namespace, ref.name)
    if ref.key not in data:
        raise RedisConfigError(f"Secret {namespace}/{ref.name} has no key {ref.key!r}")
    return base64.b64decode(data[ref.key]).decode()


async def resolve(namespace: str, spec: ScrapePoolSpec) -> ResolvedRedis:
    redis = spec.redis
    url = redis.url or await _secret_value(namespace, redis.url_secret_ref)  # type: ignore[arg-type]
    password = await _secret_value(namespace, redis.password_secret_ref) if redis.password_secret_ref else None
    if redis.url_secret_ref is not None:
        problem = redis_url_problem(url)
        if problem is not None:  # the URL itself may carry a password: name the Secret, not its value
            raise RedisConfigError(
                f"Secret {namespace}/{redis.url_secret_ref.name} key {redis.url_secret_ref.key!r} does not hold "
                f"a valid Redis URL: {problem}"
            )
    tls = bool(redis.tls and redis.tls.enabled) or url.startswith("rediss://")
    ca = await _secret_value(namespace, redis.tls.ca_secret_ref) if redis.tls and redis.tls.ca_secret_ref else None
    return ResolvedRedis(
        url,
        password,
        tls,
        bool(redis.tls and redis.tls.insecure_skip_verify),
        ca,
        cluster=redis.mode == RedisMode.CLUSTER,
    )


def make_client(cfg: ResolvedRedis, **extra: Any) -> aioredis.Redis:
    """A single-server or cluster client (``cfg.cluster``) with the pool's password and TLS."""
    kwargs: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 10, "health_check_interval": 30}
    kwargs.update(extra)
    return connect(
        cfg.url,
        cluster=cfg.cluster,
        password=cfg.password,
        tls=cfg.tls,
        insecure=cfg.insecure,
        ca_pem=cfg.ca_pem,
        **kwargs,
    )


class RedisConnections:
    """One client per distinct connection setting; replaced when a pool's settings change.

    A client is pinged when it is created and after a failure was reported, not on every reconcile:
    on a busy operator a per-pass ping is the first thing to time out, which would mark healthy
    pools' jobs as stalled."""

    def __init__(self) -> None:
        self._clients: dict[str, aioredis.Redis] = {}
        self._verified: set[str] = set()
        self._by_pool: dict[tuple[str, str], str] = {}
        self._lock = asyncio.Lock()

    async def for_pool(self, namespace: str, pool: str, spec: ScrapePoolSpec) -> aioredis.Redis:
        cfg = await resolve(namespace, spec)
        stale: aioredis.Redis | None = None
        async with self._lock:
            client = self._clients.get(cfg.fingerprint)
            if client is None:
                client = make_client(cfg)
                self._clients[cfg.fingerprint] = client
            previous = self._by_pool.get((namespace, pool))
            self._by_pool[(namespace, pool)] = cfg.fingerprint
            if previous is not None and previous != cfg.fingerprint and previous not in self._by_pool.values():
                # Settings rotated and no other pool uses the old ones: close its connections.
                stale = self._clients.pop(previous, None)
                self._verified.discard(previous)
        if stale is not None:
            await stale.aclose()
        if cfg.fingerprint in self._verified:
            return client
        try:
            await asyncio.wait_for(client.ping(), timeout=5)
        except (RedisError, OSError, TimeoutError) as exc:
            raise RedisUnreachable(f"Redis at {cfg.safe_target} is unreachable: {type(exc).__name__}") from None
        self._verified.add(cfg.fingerprint)
        return client

    async def forget_pool(self, namespace: str, pool: str) -> None:
        """The pool is gone: close its client unless another pool shares the settings."""
        async with self._lock:
            fingerprint = self._by_pool.pop((namespace, pool), None)
            stale = None
            if fingerprint is not None and fingerprint not in self._by_pool.values():
                stale = self._clients.pop(fingerprint, None)
                self._verified.discard(fingerprint)
        if stale is not None:
            await stale.aclose()

    def failed(self, namespace: str, pool: str) -> None:
        """A command on the pool's Redis failed: ping it again before trusting it."""
        fingerprint = self._by_pool.get((namespace, pool))
        if fingerprint is not None:
            self._verified.discard(fingerprint)

    async def close(self) -> None:
        async with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
            self._by_pool.clear()
            self._verified.clear()
        for client in clients:
            await client.aclose()
