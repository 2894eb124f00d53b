"""Redis clients for pools, built from the pool's spec and Secrets, cached per connection settings.

Credentials come from the operator's index of Secrets (a watch, see handlers.secret_index), are kept
only in memory, and are never logged or written to a status: errors name the host and port only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from trawl.api.naming import queue_prefix
from trawl.api.scrapepool import RedisMode, ScrapePoolSpec, redis_url_problem
from trawl.queue import Queue
from trawl.queue.sharded import make_queue
from trawl.redisconn.settings import (
    RedisConfigError,
    RedisUnreachable,
    ResolvedRedis,
    make_client,
    sentinel_target,
)

from .secrets import secret_value

log = logging.getLogger(__name__)


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


_queues: dict[tuple[int, str, float, int, int], Queue] = {}


def pool_queue(redis: Any, namespace: str, pool_name: str, pool: ScrapePoolSpec) -> Queue:
    """The pool's queue client, reused across passes (it caches its scripts and job policies)."""
    prefix = queue_prefix(namespace, pool_name, pool.redis.key_prefix)
    key = (id(redis), prefix, pool.queue.lease_seconds, pool.queue.max_stalls, pool.redis.shards)
    queue = _queues.get(key)
    if queue is None or queue.redis is not redis:
        queue = make_queue(
            redis,
            prefix,
            pool.redis.shards,
            lease_seconds=pool.queue.lease_seconds,
            max_stalls=pool.queue.max_stalls,
        )
        _queues[key] = queue
    return queue
