"""Entry point of `trawl worker`: Redis connection from the environment, logging, the asyncio run."""

from __future__ import annotations

import contextlib
import gc
import os
from typing import Any

from redis.asyncio import Redis

from trawl.boot import eventloop
from trawl.queue.claimsize import parse_setting
from trawl.queue.keys import incarnation_id
from trawl.redisconn.client import connect
from trawl.redisconn.sentinel import SentinelTarget

from . import logs
from .config import WorkerConfig, default_worker_id
from .runner import Worker


def sentinel_from_env(sentinels: str | None = None, master: str | None = None) -> SentinelTarget | None:
    """The Sentinels (``h1:p1,h2:p2``) and master name given, else TRAWL_REDIS_SENTINELS /
    TRAWL_REDIS_SENTINEL_MASTER; TRAWL_REDIS_SENTINEL_PASSWORD is the Sentinels' password. None: no
    Sentinel (the URL names the server)."""
    sentinels = sentinels or os.environ.get("TRAWL_REDIS_SENTINELS") or ""
    master = master or os.environ.get("TRAWL_REDIS_SENTINEL_MASTER") or ""
    if not sentinels and not master:
        return None
    return SentinelTarget.parse(sentinels, master, os.environ.get("TRAWL_REDIS_SENTINEL_PASSWORD") or None)


# A worker's Redis timeout, in seconds, between these bounds (see redis_timeout).
# Young-generation collections every this many net allocations (CPython's default is 700). A polite crawl of
# 1,000 hosts spent 10-13 % of the worker's CPU in the cyclic collector at 700, 1.5-3 % at 20,000
# (bench/many_hosts.py, issue 37): nearly every object a page makes is freed by reference counting, so
# collecting that often mostly walks live ones. Cyclic garbage waits for at most this many allocations.
GC_YOUNG_THRESHOLD = 10_000
REDIS_TIMEOUT_MIN = 2.0
REDIS_TIMEOUT_MAX = 7.5


def heartbeat_seconds(lease_seconds: float) -> float:
    """How often a worker renews its leases: four times a lease, at most every 5 s."""
    return max(0.5, min(5.0, lease_seconds / 4))


def redis_timeout(lease_seconds: float) -> float:
    """How long a worker's command waits for Redis to answer (and to connect) before it fails with a
    timeout, which the queue retries like a lost connection (a new connection; 6 attempts in all).

    A quarter of the lease, between 2 and 7.5 s (7.5 s at the default 30 s lease):

    - above Redis's own ``busy-reply-threshold`` (5 s): a Redis running a long script answers every other
      command with BUSY by then, so a healthy Redis always answers within it and no command times out
      for being slow rather than unanswered;
    - a quarter of the lease (for leases of 8 s and more): a heartbeat stuck on a dead connection fails and
      is retried on a new one well before the worker's leases run out;
    - six attempts and their backoff (about 47 s at 7.5 s) end before the worker's liveness bound (twelve
      heartbeats: 60 s at the default lease; true for any lease of 5 s or more), so a Redis that stops
      answering makes heartbeats fail, logged, instead of making the kubelet restart workers that a restart
      cannot cure;
    - at least 2 s: the short leases of tests, on a loaded machine, see no timeout of a Redis that answers.
    """
    return min(REDIS_TIMEOUT_MAX, max(REDIS_TIMEOUT_MIN, lease_seconds / 4))


def redis_from_env(
    url: str,
    *,
    cluster: bool | None = None,
    sentinel: SentinelTarget | None = None,
    timeout: float = REDIS_TIMEOUT_MAX,
) -> Redis:
    """A client for ``url`` plus TRAWL_REDIS_PASSWORD / TRAWL_REDIS_TLS* / TRAWL_REDIS_CLUSTER /
    TRAWL_REDIS_SENTINEL* as the operator sets them (``cluster`` or ``sentinel`` given explicitly win
    over the environment; with a Sentinel the URL is unused). ``timeout`` bounds every connect and every
    wait for a reply (:func:`redis_timeout`): without it, a Redis that stops answering (stopped, or a
    connection black-holed) held every command, heartbeats and claims too, for as long as it lasted."""
    if cluster is None:
        cluster = os.environ.get("TRAWL_REDIS_CLUSTER") == "true"
    if sentinel is None and not cluster:
        sentinel = sentinel_from_env()
    kwargs: dict[str, Any] = {
        "health_check_interval": 30,
        "socket_keepalive": True,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
    }
    return connect(
        url,
        cluster=cluster,
        password=os.environ.get("TRAWL_REDIS_PASSWORD") or None,
        tls=os.environ.get("TRAWL_REDIS_TLS") == "true",
        insecure=os.environ.get("TRAWL_REDIS_TLS_INSECURE") == "true",
        ca_pem=os.environ.get("TRAWL_REDIS_CA_PEM") or None,
        sentinel=sentinel,
        multiplex=True,  # a single server: every slot's commands share one connection (trawl.redisconn.mux)
        **kwargs,
    )


async def _run(config: WorkerConfig, lease_seconds: float) -> int:
    from trawl.queue.keys import Keys
    from trawl.queue.sharded import make_queue

    sentinel = sentinel_from_env(config.redis_sentinels, config.redis_sentinel_master)
    redis = redis_from_env(
        config.redis_url,
        cluster=config.redis_cluster or None,
        sentinel=sentinel,
        timeout=redis_timeout(lease_seconds),
    )
    try:
        queue = make_queue(redis, config.prefix, config.redis_shards, lease_seconds=lease_seconds)
        worker = Worker(config, queue, redis, Keys(config.prefix))
        worker.install_signal_handlers()
        await worker.run()
        retire = getattr(queue, "retire_worker", None)
        if retire is not None:
            with contextlib.suppress(Exception):  # leases are released already; a stale entry ages out
                await retire(config.worker_id)
    finally:
        await redis.aclose()
    return 0


def main(
    *,
    redis_url: str,
    prefix: str,
    redis_cluster: bool = False,
    redis_sentinels: str = "",
    redis_sentinel_master: str = "",
    redis_shards: int = 1,
    concurrency: int = 32,
    claim_batch: str = "auto",
    drain_seconds: float = 30.0,
    metrics_port: int = 0,
    metrics_address: str = "0.0.0.0",
    allowed_cidrs: str = "",
    postgres_cleartext_password: bool = False,
    worker_id: str = "",
    lease_seconds: float = 30.0,
    log_level: str = "INFO",
    parse_processes: int = 2,
    parse_seconds: float = 10.0,
    max_tasks: int = 0,
    max_rss_mb: int = 0,
    parse_inline_max_tags: int = 2048,
    breaker_failures: int = 5,
    breaker_open_seconds: float = 30.0,
) -> int:
    # What start-up made (modules, classes, the API's models) lives as long as the process: frozen out of
    # the collector's generations, so full collections during the crawl no longer walk it. Collection is
    # back on (trawl.cli turns it off while a worker imports).
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)
    gc.enable()
    pod = worker_id or default_worker_id()
    wid = incarnation_id(pod)  # one id per process start: a restart in the same pod is a new worker
    logs.setup(log_level, worker=wid)
    config = WorkerConfig(
        redis_url=redis_url,
        redis_cluster=redis_cluster,
        redis_sentinels=redis_sentinels,
        redis_sentinel_master=redis_sentinel_master,
        redis_shards=redis_shards,
        prefix=prefix,
        pod=pod,
        worker_id=wid,
        concurrency=concurrency,
        claim_batch=parse_setting(claim_batch),
        lease_seconds=lease_seconds,
        drain_seconds=drain_seconds,
        heartbeat_seconds=heartbeat_seconds(lease_seconds),
        metrics_port=metrics_port or None,
        metrics_address=metrics_address,
        allowed_cidrs=[c.strip() for c in allowed_cidrs.split(",") if c.strip()],
        postgres_cleartext_password=postgres_cleartext_password,
        parse_processes=parse_processes,
        parse_seconds=parse_seconds,
        max_tasks=max_tasks,
        max_rss_mb=max_rss_mb,
        parse_inline_max_tags=parse_inline_max_tags,
        breaker_failures=breaker_failures,
        breaker_open_seconds=breaker_open_seconds,
    )
    return eventloop.run(_run(config, lease_seconds))
