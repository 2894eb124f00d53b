"""Reading a job's data from its pool's Redis: dead letters and the result stream.

The connection comes from the ScrapePool (URL or Secret, password Secret, TLS), read with the CLI's
own Kubernetes credentials, or from ``--redis-url`` when the pool's Redis is reachable only through
a port-forward. The CLI only reads Redis; changes go through the operator (annotations).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import RedisClusterException, RedisError

from trawl.api.naming import queue_prefix
from trawl.api.scrapepool import RedisMode, ScrapePoolSpec
from trawl.queue import Queue, QueueUnavailable
from trawl.queue.model import DeadLetterRecord
from trawl.queue.sharded import make_queue
from trawl.redisconn.settings import ResolvedRedis, make_client, sentinel_target
from trawl.sinks.redisstream import decode_entry

from .cluster import Cluster
from .exits import EXIT_REDIS, CliError

PAGE = 1000


@dataclass(frozen=True)
class JobRef:
    """What locates a job's keys: its namespace, pool, uid and the pool's queue prefix."""

    namespace: str
    name: str
    pool: str
    uid: str
    prefix: str
    shards: int = 1


def resolve_redis(cluster: Cluster, pool: dict[str, Any], redis_url: str | None) -> ResolvedRedis:
    name = pool["metadata"]["name"]
    pool_ns = pool["metadata"].get("namespace") or cluster.namespace  # its Secrets are there
    try:
        spec = ScrapePoolSpec.model_validate(pool.get("spec") or {})
    except ValidationError as exc:
        raise CliError(f"ScrapePool {pool_ns}/{name} is invalid: {exc.errors()[0]['msg']}") from None
    r = spec.redis
    redis_cluster = r.mode == RedisMode.CLUSTER
    if redis_url:
        # A port-forward reaches one node only: a cluster client would then follow the nodes' own
        # addresses (in-cluster), so a cluster pool read through --redis-url needs those reachable too.
        # A Sentinel pool's master read through --redis-url is read as a single server (no Sentinel).
        return ResolvedRedis(redis_url, None, redis_url.startswith("rediss://"), False, None, cluster=redis_cluster)

    def secret(ref: Any) -> str:
        try:
            return cluster.read_secret_key(ref.name, ref.key, namespace=pool_ns)
        except CliError as exc:
            raise CliError(f"the Redis settings of ScrapePool {name}: {exc.message}", EXIT_REDIS) from None

    password = secret(r.password_secret_ref) if r.password_secret_ref else None
    ca = secret(r.tls.ca_secret_ref) if r.tls and r.tls.ca_secret_ref else None
    insecure = bool(r.tls and r.tls.insecure_skip_verify)
    if r.mode == RedisMode.SENTINEL:
        ref = r.sentinel_password_secret_ref
        target = sentinel_target(spec, secret(ref) if ref is not None else None)
        return ResolvedRedis("", password, bool(r.tls and r.tls.enabled), insecure, ca, sentinel=target)
    url = r.url or secret(r.url_secret_ref)
    tls = bool(r.tls and r.tls.enabled) or url.startswith("rediss://")
    return ResolvedRedis(url, password, tls, insecure, ca, cluster=redis_cluster)


def job_ref(job: dict[str, Any], pool: dict[str, Any]) -> JobRef:
    meta = job["metadata"]
    key_prefix = ((pool.get("spec") or {}).get("redis") or {}).get("keyPrefix")
    return JobRef(
        namespace=meta["namespace"],
        name=meta["name"],
        pool=pool["metadata"]["name"],
        uid=meta["uid"],
        # The pool's namespace: a job may run on a pool shared from another one (spec.poolNamespace).
        prefix=queue_prefix(
            pool["metadata"].get("namespace") or meta["namespace"], pool["metadata"]["name"], key_prefix
        ),
        shards=int(((pool.get("spec") or {}).get("redis") or {}).get("shards") or 1),
    )


@asynccontextmanager
async def open_queue(cfg: ResolvedRedis, prefix: str, pool_name: str, shards: int = 1) -> AsyncIterator[Queue]:
    client = make_client(cfg, socket_connect_timeout=3, socket_timeout=10)
    try:
        try:
            await asyncio.wait_for(client.ping(), timeout=5)
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            # a Sentinel's "no master" says what each Sentinel answered (addresses only, no secret)
            why = f"{type(exc).__name__}: {exc}" if isinstance(exc, MasterNotFoundError) else type(exc).__name__
            raise CliError(
                f"cannot reach the Redis of ScrapePool {pool_name} at {cfg.safe_target} ({why})",
                EXIT_REDIS,
                hint="from outside the cluster, port-forward it and pass --redis-url redis://127.0.0.1:PORT/0",
            ) from None
        yield make_queue(client, prefix, shards, retries=1)
    except (QueueUnavailable, RedisError, RedisClusterException, OSError) as exc:
        raise CliError(f"Redis error while reading ScrapePool {pool_name}'s queue: {exc}", EXIT_REDIS) from None
    finally:
        await client.aclose()


async def dead_letters(cfg: ResolvedRedis, ref: JobRef) -> list[DeadLetterRecord]:
    """Every dead letter of the job, latest first."""
    async with open_queue(cfg, ref.prefix, ref.pool, ref.shards) as queue:
        stats = await queue.job_stats(ref.uid)
        return await queue.dead_letters(ref.uid, limit=max(stats.dead, 0) + 1000)


async def result_records(cfg: ResolvedRedis, ref: JobRef) -> AsyncGenerator[dict[str, Any], None]:
    """The job's result records in the order written, read in pages of the stream."""
    async with open_queue(cfg, ref.prefix, ref.pool, ref.shards) as queue:
        key = queue.keys.results(ref.uid)
        start = "-"
        while True:
            page = await queue.redis.xrange(key, min=start, count=PAGE)
            for entry_id, fields in page:
                yield decode_entry(fields)
                last = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                start = f"({last}"
            if len(page) < PAGE:
                return


async def results_exist(cfg: ResolvedRedis, ref: JobRef) -> bool:
    async with open_queue(cfg, ref.prefix, ref.pool, ref.shards) as queue:
        return bool(await queue.redis.exists(queue.keys.results(ref.uid)))
