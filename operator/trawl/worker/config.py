"""A worker process's settings (:class:`WorkerConfig`), as `trawl worker` builds them from its flags and
environment and tests and `trawl run` build them directly."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from trawl.queue.claimsize import AUTO
from trawl.queue.keys import incarnation_id

from .finish import SINK_BACKOFF_FIRST, SINK_RETRY_SECONDS
from .parsepool import DEFAULT_INLINE_MAX_TAGS, DEFAULT_MAX_BYTES, DEFAULT_MAX_TAGS
from .parsepool import DEFAULT_SECONDS as DEFAULT_PARSE_SECONDS
from .politeness.robots import UNAVAILABLE_SECONDS


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerConfig:
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_cluster: bool = False  # the URL names a node of a Redis Cluster
    redis_sentinels: str = ""  # h1:p1,h2:p2 of Redis Sentinels: the master is found through them (URL unused)
    redis_sentinel_master: str = ""  # the name the Sentinels monitor the master under
    redis_shards: int = 1  # hash tags the pool's tasks are spread over (trawl.queue.sharded)
    prefix: str = "trawl:{default/default}"
    pod: str = ""  # the pod (stable name) this process runs in; its earlier incarnations are evicted at start
    worker_id: str = ""  # this process's incarnation, "<pod>@<random>" (default: a fresh one)
    concurrency: int = 32
    claim_batch: int = AUTO  # tasks per claim; AUTO (0): sized by trawl.queue.claimsize
    lease_seconds: float = 30.0  # the queue's lease (bounds how many claimed tasks may wait for a slot)
    drain_seconds: float = 30.0
    heartbeat_seconds: float = 5.0
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"  # every interface of the pod; the local supervisor uses loopback
    allowed_cidrs: list[str] = field(default_factory=list)  # the only non-global addresses fetched or written to
    postgres_cleartext_password: bool = False  # PostgreSQL sinks may answer a cleartext password request
    max_rate_wait: float = 10.0  # wait longer than this for a domain and the task is given back with a delay
    sink_capacity: int = 0  # tasks waiting for their results to be stored before claiming stops; 0: 4x concurrency
    idle_poll_max: float = 0.25  # longest pause between claims while the queue is empty
    json_lines_dir: str | None = None  # overrides the job's directory (tests, local runs)
    robots_unavailable_seconds: float = UNAVAILABLE_SECONDS  # a 5xx robots.txt disallows its origin this long
    parse_processes: int = 2  # parser child processes; 0 parses on the event loop (no time budget)
    parse_seconds: float = DEFAULT_PARSE_SECONDS  # time budget of one page's parse and extraction
    parse_max_bytes: int = DEFAULT_MAX_BYTES
    parse_max_tags: int = DEFAULT_MAX_TAGS
    parse_inline_max_tags: int = DEFAULT_INLINE_MAX_TAGS  # pages this small parse on the loop (bounded cost)
    breaker_failures: int = 5  # consecutive timeouts/5xx/connection errors of a domain that open its breaker
    breaker_open_seconds: float = 30.0  # first open period (doubles while probes fail, up to 300 s)
    loop_stall_seconds: float = 30.0  # /livez fails when the event loop has not run for this long
    heartbeat_stale_seconds: float = 0.0  # /livez fails when no heartbeat was attempted for this long; 0: 12 beats
    max_tasks: int = 0  # recycle (drain and exit, to be restarted) after this many tasks; 0: never
    max_rss_mb: int = 0  # recycle once the process's resident memory exceeds this; 0: never
    sink_retry_seconds: float = SINK_RETRY_SECONDS  # a record's write is retried this long, then SinkFailed
    sink_backoff_seconds: float = SINK_BACKOFF_FIRST  # first delay of a record's write retries (doubling)

    def __post_init__(self) -> None:
        if not self.pod:
            self.pod = self.worker_id.split("@", 1)[0] if self.worker_id else default_worker_id()
        if not self.worker_id:
            self.worker_id = incarnation_id(self.pod)
