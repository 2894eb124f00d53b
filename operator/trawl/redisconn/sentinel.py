"""Clients for the master a set of Redis Sentinels names (``spec.redis.mode: Sentinel``).

redis-py's ``SentinelConnectionPool`` asks the Sentinels for the master's address whenever it opens a
connection, and drops a connection whose command fails to connect or meets ``READONLY`` (a demoted
master): after a failover, the next command (the queue retries connection errors with backoff) goes to
the replica the Sentinels promoted. Two things are added here:

- :class:`TrawlSentinel` says *why* no master was found, per Sentinel (unreachable, no master of that
  name, the master down), in words that end up in the pool's ``RedisUnavailable`` condition;
- :class:`SentinelMasterRedis` closes the Sentinels' connections with the client.

Neither the Sentinels' nor the master's password appears in any message: a Sentinel is named by its
address only.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any, NamedTuple

import redis.asyncio as aioredis
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

DEFAULT_SENTINEL_PORT = 26379


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (``host`` alone: port 26379) as (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":") or str(DEFAULT_SENTINEL_PORT)
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", str(DEFAULT_SENTINEL_PORT))
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not a Sentinel address (host:port)")
    return host, int(port)


class SentinelTarget(NamedTuple):
    """Where the master is found: the Sentinels' addresses, the master's name, the Sentinels' password."""

    addresses: tuple[tuple[str, int], ...]
    master_name: str
    password: str | None = None

    @classmethod
    def parse(cls, addresses: str | Iterable[str], master_name: str, password: str | None = None) -> SentinelTarget:
        """From ``"h1:p1,h2:p2"`` or a list of ``host:port``."""
        items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
        parsed = tuple(parse_address(a) for a in items if a.strip())
        if not parsed:
            raise ValueError("no Sentinel address given")
        if not master_name:
            raise ValueError("no Sentinel master name given")
        return cls(parsed, master_name, password or None)

    @property
    def display(self) -> str:
        """What a message names: the master and the Sentinels' addresses (never a password)."""
        return f"master {self.master_name!r} of Sentinels {','.join(format_address(a) for a in self.addresses)}"


def format_address(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class TrawlSentinel(Sentinel):
    """redis-py's Sentinel manager, whose "no master" error says what each Sentinel answered."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        problems: list[str] = []
        for number, sentinel in enumerate(self.sentinels):
            kwargs = sentinel.connection_pool.connection_kwargs
            where = format_address((str(kwargs.get("host")), int(kwargs.get("port") or 0)))
            try:
                masters = await sentinel.sentinel_masters()  # type: ignore[no-untyped-call]
            except (RedisConnectionError, RedisTimeoutError, ResponseError, OSError) as exc:
                # ResponseError: not a Sentinel (SENTINEL unknown), or its password refused
                problems.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            state = masters.get(service_name)
            if state is None:
                known = ", ".join(sorted(repr(str(n)) for n in masters)) or "none"
                problems.append(f"{where}: monitors no master named {service_name!r} (it knows {known})")
                continue
            if not self.check_master_state(state, service_name):
                problems.append(f"{where}: master {service_name!r} at {state['ip']}:{state['port']} is down")
                continue
            # the Sentinel that answered is asked first next time
            self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
            return str(state["ip"]), int(state["port"])
        raise MasterNotFoundError(f"no Sentinel names a live master {service_name!r}: {'; '.join(problems)}")


class SentinelMasterRedis(aioredis.Redis):
    """The master's client; closing it also closes the connections to the Sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            await sentinel.aclose()


# Options of the master's connections that the connections to the Sentinels share.
_SHARED_WITH_SENTINELS = ("socket_connect_timeout", "socket_timeout", "socket_keepalive")


def master_client(
    target: SentinelTarget,
    *,
    password: str | None = None,
    tls: bool = False,
    insecure: bool = False,
    ca_pem: str | None = None,
    **extra: Any,
) -> aioredis.Redis:
    """A client of the master the Sentinels of ``target`` name, following failovers.

    ``password`` is the master's (and its replicas'), ``target.password`` the Sentinels'. TLS applies
    to both (a Sentinel deployment with TLS serves it on the Sentinels and the data nodes alike)."""
    kwargs: dict[str, Any] = {}
    if password:
        kwargs["password"] = password
    tls_kwargs: dict[str, Any] = {}
    if tls:
        tls_kwargs = {"ssl": True, "ssl_cert_reqs": ssl.CERT_NONE if insecure else ssl.CERT_REQUIRED}
        if ca_pem:
            tls_kwargs["ssl_ca_data"] = ca_pem
    kwargs.update(tls_kwargs)
    kwargs.update(extra)
    sentinel_kwargs: dict[str, Any] = {k: kwargs[k] for k in _SHARED_WITH_SENTINELS if k in kwargs}
    sentinel_kwargs.update(tls_kwargs)
    if target.password:
        sentinel_kwargs["password"] = target.password
    manager = TrawlSentinel(list(target.addresses), sentinel_kwargs=sentinel_kwargs, **kwargs)  # type: ignore[no-untyped-call]
    client: aioredis.Redis = manager.master_for(target.master_name, redis_class=SentinelMasterRedis)
    return client


def is_sentinel(client: Any) -> bool:
    return isinstance(client, SentinelMasterRedis)
