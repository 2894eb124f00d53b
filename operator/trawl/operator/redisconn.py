"""Redis clients for pools, built from the pool's spec and Secrets, cached per connection settings.

Credentials come from the operator's index of Secrets (a watch, see handlers.secret_index), are kept
only in memory, and are never logged or written to a status: errors name the host and port only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from trawl.api.common import SecretKeyRef
from trawl.api.scrapepool import RedisMode, ScrapePoolSpec, redis_url_problem
from trawl.redisclient import connect
from trawl.sentinelclient import SentinelTarget

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


# Secret types that never hold Redis settings and can be large (Helm keeps every release in one):
# indexed without their data, so their presence still counts (spec.worker.secrets may name them).
DATALESS_SECRET_TYPES = frozenset(
    {
        "helm.sh/release.v1",
        "kubernetes.io/service-account-token",
        "kubernetes.io/dockercfg",
        "kubernetes.io/dockerconfigjson",
        "bootstrap.kubernetes.io/token",
    }
)


def secret_index_entry(
    secret_type: str | None, data: Mapping[str, Any] | None, resource_version: str | None = None
) -> dict[str, Any]:
    """What the operator keeps of a Secret in its index (fed by a watch): its base64 data, and a version.

    The index replaces a GET per reconcile (once a second per active job) and a TTL cache: a rotated
    Secret reaches the clients with the watch event, and the operator needs list/watch on Secrets
    but no get. Kept only in memory, never logged or written to a status. The version is a digest of
    the data, not the resourceVersion: a label or annotation edit (a GitOps tool's tracking label,
    say) changes the latter, and must not roll the workers that read the Secret (the types kept
    without data have only the resourceVersion)."""
    if secret_type in DATALESS_SECRET_TYPES:
        return {"data": {}, "version": resource_version or ""}
    kept = {str(k): str(v) for k, v in (data or {}).items()}
    digest = hashlib.sha256()
    for key in sorted(kept):
        digest.update(f"{key}\0{kept[key]}\0".encode())
    return {"data": kept, "version": digest.hexdigest()[:16]}


def secret_data(secrets: Mapping[Any, Any], namespace: str, name: str) -> dict[str, str] | None:
    """The Secret's data from the index (a kopf index: key -> store of values), None if it does not exist."""
    for entry in secrets.get((namespace, name)) or ():
        data: dict[str, str] = entry["data"]
        return data
    return None


def redis_secrets_version(secrets: Mapping[Any, Any], namespace: str, spec: ScrapePoolSpec) -> str | None:
    """A digest of the versions of the Secrets the pool's Redis settings come from (None: it uses none).

    Workers read those settings once, at start (secretKeyRef environment variables): the worker pod
    template carries this digest so that a rotated Secret rolls the workers onto the new settings."""
    redis = spec.redis
    refs = [
        redis.url_secret_ref,
        redis.password_secret_ref,
        redis.sentinel_password_secret_ref,
        redis.tls.ca_secret_ref if redis.tls else None,
    ]
    names = sorted({ref.name for ref in refs if ref is not None})
    if not names:
        return None
    versions = []
    for name in names:
        entries = list(secrets.get((namespace, name)) or ())
        versions.append(f"{name}={entries[0].get('version', '') if entries else '-'}")
    return hashlib.sha256("\0".join(versions).encode()).hexdigest()[:16]


def secret_value(secrets: Mapping[Any, Any], namespace: str, ref: SecretKeyRef) -> str:
    """One key of a Secret, decoded; RedisConfigError (naming the Secret, never the value) if absent."""
    data = secret_data(secrets, namespace, ref.name)
    if data is None:
        raise RedisConfigError(f"Secret {namespace}/{ref.name} not found")
    if ref.key not in data:
        raise RedisConfigError(f"Secret {namespace}/{ref.name} has no key {ref.key!r}")
    return base64.b64decode(data[ref.key]).decode()


def secret_reader(secrets: Mapping[Any, Any]) -> Callable[[str, SecretKeyRef], Awaitable[str]]:
    """An async reader of Secret keys from the index, for the sink checks and onComplete hooks."""

    async def read(namespace: str, ref: SecretKeyRef) -> str:
        return secret_value(secrets, namespace, ref)

    return read


no_secrets = secret_reader({})  # what code running without an index (tests, tools) sees: none exist


def resolve(namespace: str, spec: ScrapePoolSpec, secrets: Mapping[Any, Any]) -> ResolvedRedis:
    """The pool's connection settings, its Secrets read from the index ``secrets``."""
    redis = spec.redis
    password = secret_value(secrets, namespace, redis.password_secret_ref) if redis.password_secret_ref else None
    ca = secret_value(secrets, namespace, redis.tls.ca_secret_ref) if redis.tls and redis.tls.ca_secret_ref else None
    if redis.mode == RedisMode.SENTINEL:
        ref = redis.sentinel_password_secret_ref
        sentinel_password = secret_value(secrets, namespace, ref) if ref is not None else None
        return ResolvedRedis(
            "",
            password,
            bool(redis.tls and redis.tls.enabled),
            bool(redis.tls and redis.tls.insecure_skip_verify),
            ca,
            sentinel=sentinel_target(spec, sentinel_password),
        )
    url = redis.url or secret_value(secrets, namespace, redis.url_secret_ref)  # type: ignore[arg-type]
    if redis.url_secret_ref is not None:
        problem = redis_url_problem(url)
        if problem is not None:  # the URL itself may carry a password: name the Secret, not its value
            raise RedisConfigError(
                f"Secret {namespace}/{redis.url_secret_ref.name} key {redis.url_secret_ref.key!r} does not hold "
                f"a valid Redis URL: {problem}"
            )
    tls = bool(redis.tls and redis.tls.enabled) or url.startswith("rediss://")
    return ResolvedRedis(
        url,
        password,
        tls,
        bool(redis.tls and redis.tls.insecure_skip_verify),
        ca,
        cluster=redis.mode == RedisMode.CLUSTER,
    )


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


# A replaced client is closed this long after its replacement: a pass that fetched it just before
# finishes its commands rather than failing on a closed connection.
CLOSE_GRACE_SECONDS = 5.0


class RedisConnections:
    """One client per distinct connection setting; replaced when a pool's settings change.

    A client is pinged when it is created and after a failure was reported, not on every reconcile:
    on a busy operator a per-pass ping is the first thing to time out, which would mark healthy
    pools' jobs as stalled. Settings that changed (a rotated Secret, an edited spec) give a new
    client on the pool's next pass; the old one is closed once no pool uses it."""

    def __init__(self, close_grace: float = CLOSE_GRACE_SECONDS) -> None:
        self._clients: dict[str, aioredis.Redis] = {}
        self._verified: set[str] = set()
        self._by_pool: dict[tuple[str, str], str] = {}
        self._lock = asyncio.Lock()
        self._close_grace = close_grace
        self._closing: set[asyncio.Task[None]] = set()

    def _retire(self, client: aioredis.Redis) -> None:
        async def close_later() -> None:
            try:
                await asyncio.sleep(self._close_grace)
            finally:
                await client.aclose()

        task = asyncio.create_task(close_later())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def for_pool(
        self, namespace: str, pool: str, spec: ScrapePoolSpec, secrets: Mapping[Any, Any]
    ) -> aioredis.Redis:
        cfg = resolve(namespace, spec, secrets)
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
            log.info("pool %s/%s: Redis settings changed; closing the previous client", namespace, pool)
            self._retire(stale)
        if cfg.fingerprint in self._verified:
            return client
        cluster_enabled = None
        try:
            await asyncio.wait_for(client.ping(), timeout=5)
            if not cfg.cluster:
                with contextlib.suppress(ResponseError):  # INFO may be denied by an ACL: no check then
                    info = await asyncio.wait_for(client.info("cluster"), timeout=5)
                    cluster_enabled = str(info.get("cluster_enabled", "0"))
        except RedisClusterException as exc:  # the cluster client met a server that is not a cluster node
            raise RedisConfigError(
                f"Redis at {cfg.safe_target} is not a Redis Cluster but spec.redis.mode is Cluster: {exc}"
            ) from None
        except MasterNotFoundError as exc:  # each Sentinel's answer, addresses only: no secret in it
            raise RedisUnreachable(f"Redis at {cfg.safe_target} is unreachable: {exc}") from None
        except (RedisError, OSError, TimeoutError) as exc:
            raise RedisUnreachable(f"Redis at {cfg.safe_target} is unreachable: {type(exc).__name__}") from None
        if cluster_enabled == "1":
            # A single-server client would follow none of the cluster's MOVED replies: say what to set.
            raise RedisConfigError(f"Redis at {cfg.safe_target} is a Redis Cluster node: set spec.redis.mode: Cluster")
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
        for task in list(self._closing):  # retired clients: close them now
            task.cancel()
        await asyncio.gather(*self._closing, return_exceptions=True)
