"""How full a pool's Redis is, and what that means: read from ``INFO memory`` (allowed when Redis is full).

A Redis with ``maxmemory`` (the chart's bundled Redis has 384mb) either refuses writes once it is full
(``maxmemory-policy noeviction``: ``OOM command not allowed``) or evicts keys to make room (every other
policy). Refused writes stop a pool without a word anywhere but the workers' logs: claims, heartbeats,
acks and result records all write. Eviction is worse: it removes queued tasks, leases, dedupe entries or
result streams with no error at all. So the operator reads this on each pool pass and shows the first as
``RedisOutOfMemory`` on the pool and its running jobs, the second as the pool's ``Degraded`` condition.

The decisions are properties of :class:`RedisMemory` and pure functions of it; :func:`read_memory` is
the one round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

OUT_OF_MEMORY = "RedisOutOfMemory"
EVICTION_POLICY = "RedisEvictionPolicy"
_REMEDY = (
    "raise maxmemory, or free memory (read and trim the RedisStream results of finished jobs, delete "
    "finished ScrapeJobs or shorten their ttlSecondsAfterFinished)"
)


@dataclass(frozen=True, slots=True)
class RedisMemory:
    """One server's memory as Redis counts it against ``maxmemory`` (0: no limit)."""

    used: int  # used_memory less what Redis does not count for maxmemory (replica and AOF buffers)
    limit: int
    policy: str

    @property
    def full(self) -> bool:
        """Whether Redis refuses commands that may grow memory (it checks ``used > maxmemory``)."""
        return self.limit > 0 and self.policy == "noeviction" and self.used > self.limit

    @property
    def evicts(self) -> bool:
        """Whether Redis removes keys to stay under its limit."""
        return self.limit > 0 and self.policy != "noeviction"


def _mb(n: int) -> str:
    return f"{n / 1048576:.1f} MB"


def parse_memory_info(info: Mapping[str, Any]) -> RedisMemory | None:
    """``INFO memory`` of one server, or of each node of a cluster (``{node: info}``): the fullest one.
    None when it does not say (a Redis-compatible server or proxy with its own INFO): no check then."""
    if "used_memory" not in info:
        nodes = [m for v in info.values() if isinstance(v, Mapping) and (m := parse_memory_info(v)) is not None]
        return max(nodes, key=lambda m: (m.full, m.evicts, m.used / m.limit if m.limit else 0.0), default=None)
    try:
        used = int(info["used_memory"]) - int(info.get("mem_not_counted_for_evict") or 0)
        limit = int(info.get("maxmemory") or 0)
    except (TypeError, ValueError):
        return None
    return RedisMemory(used=used, limit=limit, policy=str(info.get("maxmemory_policy") or "noeviction"))


def out_of_memory_message(memory: RedisMemory | None) -> str:
    """Why a full Redis stops the pool, and what to do about it."""
    figures = (
        f" ({_mb(memory.used)} used of maxmemory {_mb(memory.limit)}, maxmemory-policy noeviction)"
        if memory is not None and memory.limit
        else ""
    )
    return (
        f"the pool's Redis is full{figures}: it refuses writes, so workers can neither claim tasks nor "
        f"store results, and new jobs cannot be enqueued; nothing is lost, work resumes once it has room: {_REMEDY}"
    )


def eviction_warning(memory: RedisMemory) -> str | None:
    """Why an evicting policy puts the pool's data at risk (None: it does not evict)."""
    if not memory.evicts:
        return None
    return (
        f"the pool's Redis has maxmemory {_mb(memory.limit)} with maxmemory-policy {memory.policy}: when it "
        "fills up it deletes keys, which can drop queued tasks, leases, dedupe entries and results without "
        "any error; set maxmemory-policy noeviction (a full Redis then refuses writes, which Trawl reports "
        "and recovers from)"
    )


async def read_memory(client: aioredis.Redis) -> RedisMemory | None:
    """One ``INFO memory`` (of every primary, for a Redis Cluster). None if the server refuses it (an ACL,
    a proxy without INFO): the pool works as before, without this check. A connection error propagates."""
    try:
        if isinstance(client, RedisCluster):
            info = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)  # type: ignore[call-arg]
        else:
            info = await client.info("memory")
    except ResponseError:
        return None
    return parse_memory_info(info) if isinstance(info, Mapping) else None


async def read_memory_or_none(client: aioredis.Redis) -> RedisMemory | None:
    """:func:`read_memory`, or None if it fails: for the figures of a message whose fact is known already."""
    try:
        return await read_memory(client)
    except Exception:
        return None


async def out_of_memory(client: aioredis.Redis) -> tuple[str, str]:
    """(reason, message) for a write Redis refused as out of memory, with its figures if INFO answers."""
    return OUT_OF_MEMORY, out_of_memory_message(await read_memory_or_none(client))
