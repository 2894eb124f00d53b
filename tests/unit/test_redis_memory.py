"""How full a pool's Redis is, read from INFO memory, and what the pool's status says about it: a full
Redis (noeviction) is RedisOutOfMemory with its figures and the remedy; an evicting policy is Degraded,
told once by an Event."""

from __future__ import annotations

from datetime import UTC, datetime

from redis.exceptions import OutOfMemoryError

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator.conditions import is_true
from trawl.operator.pool.status import finish_pass
from trawl.operator.problems import classify_error
from trawl.redisconn.memory import (
    EVICTION_POLICY,
    OUT_OF_MEMORY,
    RedisMemory,
    eviction_warning,
    out_of_memory_message,
    parse_memory_info,
)

NOW = datetime(2026, 11, 27, 11, 0, tzinfo=UTC)
MB = 1048576


def _info(used: int, limit: int, policy: str = "noeviction", not_counted: int = 0) -> dict[str, object]:
    return {
        "used_memory": used,
        "maxmemory": limit,
        "maxmemory_policy": policy,
        "mem_not_counted_for_evict": not_counted,
    }


def _parsed(info: dict[str, object]) -> RedisMemory:
    memory = parse_memory_info(info)
    assert memory is not None
    return memory


def test_full_means_over_maxmemory_as_redis_counts_it_under_noeviction() -> None:
    assert not _parsed(_info(900 * MB, 0)).full  # no limit
    assert not _parsed(_info(300 * MB, 384 * MB)).full
    full = _parsed(_info(385 * MB, 384 * MB))
    assert full.full and not full.evicts
    # Replica and AOF buffers are not counted against maxmemory (Redis does the same subtraction).
    assert not _parsed(_info(385 * MB, 384 * MB, not_counted=2 * MB)).full
    # An evicting policy never refuses writes: it deletes keys instead.
    lru = _parsed(_info(385 * MB, 384 * MB, "allkeys-lru"))
    assert lru.evicts and not lru.full


def test_a_server_whose_info_does_not_say_is_not_checked() -> None:
    # A Redis-compatible server or proxy with an INFO of its own: no figures, no check, no error.
    assert parse_memory_info({"redis_version": "7.2.0"}) is None
    assert parse_memory_info({"used_memory": "n/a"}) is None
    assert parse_memory_info({"a:1": {"role": "proxy"}}) is None
    assert _parsed({"used_memory": 5 * MB}) == RedisMemory(5 * MB, 0, "noeviction")  # no maxmemory fields


def test_a_cluster_is_as_full_as_its_fullest_primary() -> None:
    nodes = {
        "10.0.0.1:6379": _info(10 * MB, 384 * MB),
        "10.0.0.2:6379": _info(385 * MB, 384 * MB),
        "10.0.0.3:6379": _info(200 * MB, 384 * MB),
    }
    assert parse_memory_info(nodes) == RedisMemory(used=385 * MB, limit=384 * MB, policy="noeviction")


def test_the_messages_give_the_figures_and_the_remedy() -> None:
    msg = out_of_memory_message(RedisMemory(385 * MB, 384 * MB, "noeviction"))
    assert "385.0 MB used of maxmemory 384.0 MB" in msg and "raise maxmemory" in msg and "nothing is lost" in msg
    assert "used of maxmemory" not in out_of_memory_message(None)  # INFO did not answer: no figures
    assert eviction_warning(RedisMemory(10 * MB, 0, "allkeys-lru")) is None  # no limit: nothing is evicted
    assert eviction_warning(RedisMemory(10 * MB, 384 * MB, "noeviction")) is None
    warning = eviction_warning(RedisMemory(10 * MB, 384 * MB, "volatile-lru")) or ""
    assert "volatile-lru" in warning and "set maxmemory-policy noeviction" in warning
    # A refused write anywhere in the operator is reported under the same reason.
    assert classify_error(OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))[0] == OUT_OF_MEMORY


def test_an_evicting_redis_makes_the_pool_degraded_told_once() -> None:
    spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}})
    warning = eviction_warning(RedisMemory(10 * MB, 384 * MB, "allkeys-lru"))
    first = finish_pass({"desiredReplicas": 1, "readyReplicas": 1}, {}, 1, NOW, [], spec=spec, redis_warning=warning)
    degraded = next(c for c in first.status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", EVICTION_POLICY)
    assert is_true(first.status["conditions"], "Ready")  # the pool works; its data is at risk
    assert [(e.type, e.reason) for e in first.events] == [("Warning", EVICTION_POLICY)]
    again = finish_pass({"desiredReplicas": 1}, first.status, 1, NOW, [], spec=spec, redis_warning=warning)
    assert again.events == [] and is_true(again.status["conditions"], "Degraded")
    fixed = finish_pass({"desiredReplicas": 1}, again.status, 1, NOW, [], spec=spec)
    assert not is_true(fixed.status["conditions"], "Degraded")
