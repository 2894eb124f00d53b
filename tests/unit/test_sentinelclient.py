"""Sentinel mode without servers: addresses parsed, the master's and the Sentinels' settings kept apart
(password, TLS), the pool's Sentinels reaching the workers' environment and the CLI, validation."""

from __future__ import annotations

import ssl

import pytest
from pydantic import ValidationError

from trawl.api.scrapepool import RedisMode, ScrapePoolSpec
from trawl.operator.connections import resolve
from trawl.operator.pool.deployment import redis_env
from trawl.operator.secrets import redis_secrets_version
from trawl.redisconn.client import connect, is_cluster
from trawl.redisconn.sentinel import SentinelMasterRedis, SentinelTarget, is_sentinel, parse_address
from trawl.worker.main import redis_from_env, sentinel_from_env

SENTINEL_POOL = {
    "redis": {
        "mode": "Sentinel",
        "sentinels": ["s1.redis:26379", "10.0.0.2:26380", "[fd00::1]:26379"],
        "masterName": "mymaster",
        "passwordSecretRef": {"name": "redis", "key": "password"},
        "sentinelPasswordSecretRef": {"name": "redis", "key": "sentinel-password"},
    }
}


def test_addresses_parse() -> None:
    assert parse_address("s1:26379") == ("s1", 26379)
    assert parse_address("[fd00::1]:26380") == ("fd00::1", 26380)
    assert parse_address("s1") == ("s1", 26379)
    for bad in ("s1:0", "s1:99999", ":1", "s1:x"):
        with pytest.raises(ValueError):
            parse_address(bad)
    target = SentinelTarget.parse("a:1, b:2", "m", "pw")
    assert target.addresses == (("a", 1), ("b", 2)) and target.password == "pw"
    assert target.display == "master 'm' of Sentinels a:1,b:2" and "pw" not in target.display
    with pytest.raises(ValueError):
        SentinelTarget.parse("", "m")
    with pytest.raises(ValueError):
        SentinelTarget.parse("a:1", "")


async def test_master_and_sentinels_get_their_own_password_and_both_tls() -> None:
    target = SentinelTarget.parse(["a:1", "b:2"], "m", "sentinel-pw")
    client = connect("", sentinel=target, password="master-pw", tls=True, ca_pem="PEM", socket_timeout=3)
    assert isinstance(client, SentinelMasterRedis) and is_sentinel(client) and not is_cluster(client)
    pool = client.connection_pool
    assert pool.connection_kwargs["password"] == "master-pw"
    assert pool.connection_kwargs["ssl_ca_data"] == "PEM"
    assert pool.connection_kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    assert [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"]) for s in sentinels
    ] == [("a", 1), ("b", 2)]
    for s in sentinels:
        kwargs = s.connection_pool.connection_kwargs
        assert kwargs["password"] == "sentinel-pw" and kwargs["socket_timeout"] == 3
        assert kwargs["ssl_ca_data"] == "PEM"
    assert client.pipeline(transaction=True).is_transaction  # MULTI works on the one master
    await client.aclose()
    plain = connect("", sentinel=SentinelTarget.parse("a:1", "m"))
    assert plain.connection_pool.connection_kwargs.get("password") is None
    sentinel = plain.connection_pool.sentinel_manager.sentinels[0]  # type: ignore[attr-defined]
    assert sentinel.connection_pool.connection_kwargs.get("password") is None
    await plain.aclose()


def test_sentinel_mode_validation() -> None:
    spec = ScrapePoolSpec.model_validate(SENTINEL_POOL)
    assert spec.redis.mode == RedisMode.SENTINEL and spec.redis.url is None
    for redis, message in (
        ({"mode": "Sentinel", "sentinels": ["a:1"]}, "needs both sentinels and masterName"),
        ({"mode": "Sentinel", "masterName": "m"}, "needs both sentinels and masterName"),
        ({"mode": "Sentinel", "sentinels": ["a:1"], "masterName": "m", "url": "redis://r/0"}, "not url"),
        ({"url": "redis://r/0", "masterName": "m"}, "apply to mode Sentinel only"),
        ({"mode": "Cluster", "url": "redis://r/0", "sentinels": ["a:1"]}, "apply to mode Sentinel only"),
        ({"mode": "Sentinel", "sentinels": ["a:70000"], "masterName": "m"}, "no valid port"),
        ({"mode": "Sentinel", "sentinels": [], "masterName": "m"}, "at least 1 item"),
    ):
        with pytest.raises(ValidationError, match=message):
            ScrapePoolSpec.model_validate({"redis": redis})


def test_sentinels_reach_the_worker_environment_by_reference() -> None:
    env = redis_env(ScrapePoolSpec.model_validate(SENTINEL_POOL))
    by_name = {e["name"]: e for e in env}
    assert "TRAWL_REDIS_URL" not in by_name and "TRAWL_REDIS_CLUSTER" not in by_name
    assert by_name["TRAWL_REDIS_SENTINELS"]["value"] == "s1.redis:26379,10.0.0.2:26380,[fd00::1]:26379"
    assert by_name["TRAWL_REDIS_SENTINEL_MASTER"]["value"] == "mymaster"
    assert by_name["TRAWL_REDIS_SENTINEL_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "redis", "key": "sentinel-password"}
    }
    assert by_name["TRAWL_REDIS_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "redis", "key": "password"}}


async def test_worker_reads_the_sentinels_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sentinel_from_env() is None
    monkeypatch.setenv("TRAWL_REDIS_SENTINELS", "a:1,b:2")
    monkeypatch.setenv("TRAWL_REDIS_SENTINEL_MASTER", "m")
    monkeypatch.setenv("TRAWL_REDIS_SENTINEL_PASSWORD", "spw")
    monkeypatch.setenv("TRAWL_REDIS_PASSWORD", "mpw")
    assert sentinel_from_env() == SentinelTarget((("a", 1), ("b", 2)), "m", "spw")
    client = redis_from_env("redis://127.0.0.1:6379/0")
    assert is_sentinel(client) and client.connection_pool.connection_kwargs["password"] == "mpw"
    await client.aclose()
    # the command line wins over the environment
    assert sentinel_from_env("c:3", "n") == SentinelTarget((("c", 3),), "n", "spw")


def test_operator_resolves_the_sentinels_and_both_passwords() -> None:
    import base64

    data = {
        "password": base64.b64encode(b"master-pw").decode(),
        "sentinel-password": base64.b64encode(b"sentinel-pw").decode(),
    }
    secrets = {("ns", "redis"): [{"data": data, "version": "7"}]}
    spec = ScrapePoolSpec.model_validate(SENTINEL_POOL)
    cfg = resolve("ns", spec, secrets)
    assert cfg.sentinel is not None and cfg.sentinel.password == "sentinel-pw" and cfg.password == "master-pw"
    assert cfg.safe_target == "master 'mymaster' of Sentinels s1.redis:26379,10.0.0.2:26380,[fd00::1]:26379"
    other = ScrapePoolSpec.model_validate({"redis": {**SENTINEL_POOL["redis"], "masterName": "other"}})
    assert resolve("ns", other, secrets).fingerprint != cfg.fingerprint
    # a rotated Sentinel password rolls the workers like any Redis Secret
    assert redis_secrets_version(secrets, "ns", spec) is not None
