"""The one Redis client factory: single server or cluster, password and TLS alike; the pool's mode
reaches the workers' environment."""

from __future__ import annotations

import ssl

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from trawl.api.scrapepool import RedisMode, ScrapePoolSpec
from trawl.operator.pool.deployment import redis_env
from trawl.redisconn.client import atomic_pipeline, connect, is_cluster
from trawl.redisconn.settings import ResolvedRedis, make_client
from trawl.worker.main import heartbeat_seconds, redis_from_env, redis_timeout


async def test_standalone_and_cluster_clients_carry_password_and_tls() -> None:
    plain = connect("redis://127.0.0.1:1/0", password="pw")
    assert isinstance(plain, aioredis.Redis) and not is_cluster(plain)
    assert plain.connection_pool.connection_kwargs["password"] == "pw"
    clustered = connect("redis://127.0.0.1:1/0", cluster=True, password="pw", tls=True, ca_pem="PEM")
    assert isinstance(clustered, RedisCluster) and is_cluster(clustered)
    kwargs = clustered.connection_kwargs
    assert kwargs["password"] == "pw"
    assert kwargs["ssl_ca_data"] == "PEM" and kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    # a cluster has no MULTI pipelines: the atomic pipeline degrades to a plain one there
    assert atomic_pipeline(clustered).__class__.__name__ == "ClusterPipeline"
    assert atomic_pipeline(plain).is_transaction
    await plain.aclose()
    await clustered.aclose()


async def test_operator_and_worker_pick_the_cluster_client_from_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = ResolvedRedis("redis://127.0.0.1:1/0", None, False, False, None, cluster=True)
    assert is_cluster(make_client(cfg))
    assert cfg.fingerprint != ResolvedRedis("redis://127.0.0.1:1/0", None, False, False, None).fingerprint
    monkeypatch.setenv("TRAWL_REDIS_CLUSTER", "true")
    assert is_cluster(redis_from_env("redis://127.0.0.1:1/0"))
    monkeypatch.delenv("TRAWL_REDIS_CLUSTER")
    assert not is_cluster(redis_from_env("redis://127.0.0.1:1/0"))


def test_cluster_mode_reaches_the_worker_environment() -> None:
    spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0", "mode": "Cluster"}})
    assert spec.redis.mode == RedisMode.CLUSTER
    assert {"name": "TRAWL_REDIS_CLUSTER", "value": "true"} in redis_env(spec)
    plain = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}})
    assert plain.redis.mode == RedisMode.STANDALONE
    assert all(e["name"] != "TRAWL_REDIS_CLUSTER" for e in redis_env(plain))


def test_shards_reach_the_worker_environment() -> None:
    spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0", "mode": "Cluster", "shards": 3}})
    assert {"name": "TRAWL_REDIS_SHARDS", "value": "3"} in redis_env(spec)
    one = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}})
    assert one.redis.shards == 1 and all(e["name"] != "TRAWL_REDIS_SHARDS" for e in redis_env(one))
    with pytest.raises(ValueError):
        ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0", "shards": 17}})


@pytest.mark.parametrize("lease", [5.0, 8.0, 10.0, 30.0, 120.0])
def test_a_workers_redis_timeout_fits_its_lease_and_liveness(lease: float) -> None:
    """Longer than Redis's busy-reply-threshold (5 s) from the default lease on; six attempts of a queue call
    and their backoff end before /livez's bound (twelve heartbeats); a quarter of the lease from 8 s on."""
    timeout, beat = redis_timeout(lease), heartbeat_seconds(lease)
    backoff = sum(min(0.05 * 2**k, 2.0) * 1.5 for k in range(5))  # the queue's, at its longest
    assert 2.0 <= timeout <= 7.5
    assert 6 * timeout + backoff < 12 * beat
    if lease >= 8:
        assert timeout <= lease / 4
    if lease >= 30:
        assert timeout > 5.0


async def test_the_workers_client_bounds_connects_and_replies() -> None:
    client = redis_from_env("redis://127.0.0.1:1/0", timeout=2.5)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 2.5 and kwargs["socket_connect_timeout"] == 2.5
    await client.aclose()
