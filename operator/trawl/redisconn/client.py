"""The one factory of Trawl's asyncio Redis clients: a single server, a Redis Cluster, or the master a
set of Redis Sentinels names (:mod:`trawl.redisconn.sentinel`).

The operator, the workers and the CLI all build their client here, so a pool whose Redis is a cluster
(``spec.redis.mode: Cluster``) gets ``redis.asyncio.RedisCluster`` everywhere, with the same password
and TLS settings as a single server. The cluster client follows ``MOVED``/``ASK`` redirections, retries
``TRYAGAIN`` and ``CLUSTERDOWN`` and re-reads the slot map after a failover; a script is loaded on the
node that owns its keys' slot when that node answers ``NOSCRIPT`` (a promoted replica, a restarted
master). Every key of a pool shares the pool's hash tag, so every script and pipeline of Trawl stays in
one slot on one node.

The cluster client is returned typed as ``redis.asyncio.Redis``: it implements the same command methods
Trawl calls (and none it does not), and one declared type keeps every module that takes a client simple.
The one difference that matters, ``MULTI`` pipelines, is handled by :func:`atomic_pipeline`.

A Sentinel client is a plain ``redis.asyncio.Redis`` whose connection pool asks the Sentinels for the
master's address at each new connection, and drops its connections when a command fails to connect or a
demoted master answers ``READONLY``: the next command goes to the promoted replica.
"""

from __future__ import annotations

import ssl
from typing import Any, Literal, cast

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis._parsers import _AsyncRESP2Parser
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from .sentinel import SentinelTarget, master_client

RedisMode = Literal["Standalone", "Cluster", "Sentinel"]

# Errors that say Redis (or the cluster's node for a slot) is briefly unable to answer, not that a
# command is wrong: an outage, a restart, a failover (CLUSTERDOWN, TRYAGAIN, READONLY from a demoted
# master, the client's redirection budget spent, no node reachable for the slot map). Worth a bounded
# retry; never a task's fault.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    rexc.ConnectionError,
    rexc.TimeoutError,
    rexc.ClusterError,
    rexc.TryAgainError,
    rexc.ReadOnlyError,
    rexc.RedisClusterException,  # e.g. no node of the cluster reachable to read the slot map from
    ConnectionError,
    TimeoutError,
)

# Bounded retries of the cluster client itself, before the caller's own (the queue retries connection
# errors with backoff): a failed node is dropped from the slot map and the map re-read at each attempt,
# which is what carries a command over a failover once a replica is promoted.
CLUSTER_ERROR_RETRIES = 5
CONNECTION_RETRIES = 2


class Resp2Parser(_AsyncRESP2Parser):
    """redis-py's pure-Python RESP2 parser, without a timer around the pool's check before each command.

    Before every command the pool asks the connection whether a reply is left unread or the server
    closed it (``can_read_destructive``). For this parser the answer is synchronous (its own buffer, the
    stream's EOF flag), but redis-py wraps it in ``asyncio.timeout(0)``, which schedules and cancels a
    timer each time: about 40% of a round trip's client CPU (measured at concurrency 8 on uvloop: 40 ->
    24 µs per command). Same answer, no timer. Used whether or not hiredis is installed (it was measured
    no faster for Trawl's small replies), so every install runs the same parser.
    """

    async def can_read_destructive(self) -> bool:
        stream = self._stream
        if not self._connected or stream is None:
            raise rexc.RedisError("Buffer is closed.")
        if self._buffer:
            return True
        return stream.at_eof()


class ConnectionPool(aioredis.ConnectionPool):
    """redis-py's connection pool, except that a new connection connects outside the pool's lock.

    redis-py 5.3 holds the pool's lock while a connection it hands out connects and says hello (redis-py
    issue #3692): every caller that needs a new connection waits for the connects before its own, one
    after another. Against a Redis that does not answer, each of those connects waits for the whole
    timeout, so the n-th caller waited n timeouts (a worker's 32 task slots: minutes). Taking a connection
    out of the pool involves no await, so the lock still covers all it has to; the connect is the
    caller's own, on a connection no one else holds."""

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        async with self._lock:
            connection = self.get_available_connection()  # type: ignore[no-untyped-call]
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection


def connect(
    url: str,
    *,
    cluster: bool = False,
    password: str | None = None,
    tls: bool = False,
    insecure: bool = False,
    ca_pem: str | None = None,
    sentinel: SentinelTarget | None = None,
    multiplex: bool = False,
    **extra: Any,
) -> aioredis.Redis:
    """A client for ``url`` (any node of the cluster when ``cluster``), with the password and TLS given;
    with ``sentinel``, for the master the Sentinels name (``url`` is then unused).

    ``tls`` upgrades ``redis://`` to ``rediss://``; ``insecure`` skips certificate verification;
    ``ca_pem`` is the PEM bundle that signs the server certificate. ``multiplex``: a single server's plain
    commands share one connection (:mod:`trawl.redisconn.mux`; the workers' hot path). ``extra`` goes to the
    client."""
    if sentinel is not None:  # multiplex does not apply: the Sentinel client re-resolves per connection
        if extra.get("protocol", 2) in (2, "2"):
            extra.setdefault("parser_class", Resp2Parser)
        return master_client(sentinel, password=password, tls=tls, insecure=insecure, ca_pem=ca_pem, **extra)
    kwargs: dict[str, Any] = {}
    if password:
        kwargs["password"] = password
    if tls and url.startswith("redis://"):
        url = "rediss://" + url[len("redis://") :]
    if url.startswith("rediss://"):
        kwargs["ssl_cert_reqs"] = ssl.CERT_NONE if insecure else ssl.CERT_REQUIRED
        if ca_pem:
            kwargs["ssl_ca_data"] = ca_pem
    kwargs.update(extra)
    if not cluster:
        resp2 = kwargs.get("protocol", 2) in (2, "2")
        if resp2:
            kwargs.setdefault("parser_class", Resp2Parser)
        pool = ConnectionPool.from_url(url, **kwargs)
        if multiplex and resp2:  # the shared line reads RESP2 replies
            from .mux import MultiplexedRedis

            mux: aioredis.Redis = MultiplexedRedis.from_pool(pool)
            return mux
        client: aioredis.Redis = aioredis.Redis.from_pool(pool)
        return client
    kwargs.setdefault("cluster_error_retry_attempts", CLUSTER_ERROR_RETRIES)
    kwargs.setdefault("retry", Retry(ExponentialBackoff(cap=0.5, base=0.05), CONNECTION_RETRIES))
    # A cluster has one database; a /0 in the URL is fine, anything else is refused by the client.
    return cast(aioredis.Redis, RedisCluster.from_url(url, **kwargs))


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def atomic_pipeline(client: aioredis.Redis) -> Pipeline:
    """A ``MULTI``/``EXEC`` pipeline on a single server; on a cluster (whose client has no transactions)
    a plain pipeline, sent to the one node of the keys' slot in one round trip.

    Callers use it only for commands on one key whose partial application is harmless (a value and its
    ``EXPIRE``): a crash between the two leaves a key without its TTL, never a wrong value."""
    return client.pipeline(transaction=not is_cluster(client))
