"""The worker process: claim loop, one heartbeat loop, task processing, graceful drain.

Per task: look up the job's worker spec (cached), take a pool-wide concurrency slot for the domain,
fetch (robots.txt and the pool-wide rate limit are checked before every hop), extract, enqueue
discovered links (crawl mode), write the result to the job's sink and ack. Failures are classified:
``Retry-After`` on 429/503 and long rate-limit waits give the task back with a delay (no attempt
spent, no lease held while waiting); everything else goes to ``fail``, where the queue applies the
job's retry policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import OutOfMemoryError

from trawl.api.policies import FailureClass
from trawl.api.scrapejob import SinkKind
from trawl.egress.addresses import IPNetwork, parse_networks
from trawl.jobspec.podfiles import local_path, read_secret
from trawl.queue.claimsize import AUTO, ClaimState, TaskTimer, claim_size
from trawl.queue.errors import QueueUnavailable, WorkerCordoned
from trawl.queue.keys import incarnation_id
from trawl.queue.model import QueueClient, Task
from trawl.queue.notes import JobNotes
from trawl.redisconn.client import TRANSIENT_ERRORS
from trawl.sinks.base import Record, Sink, record_key
from trawl.sinks.jsonlines import JsonLinesSink
from trawl.sinks.redisstream import RedisStreamSink
from trawl.sinks.webhook import WebhookSink
from trawl.worker.browser.hook import BrowserCrashed, Renderer

from .breaker import CircuitBreaker
from .extract import Extractor
from .fetch import Fetcher, FetchError, FetchLimits
from .finish import SINK_BACKOFF_FIRST, SINK_RETRY_SECONDS, Finish, Finisher
from .jobsettings import WorkerJobSpec, parse_worker_spec
from .metrics import WorkerMetrics
from .parsepool import DEFAULT_INLINE_MAX_TAGS, DEFAULT_MAX_BYTES, DEFAULT_MAX_TAGS, ParseLimit, ParseLimits, ParsePool
from .parsepool import DEFAULT_SECONDS as DEFAULT_PARSE_SECONDS
from .politeness import UNAVAILABLE_SECONDS, DomainLimiter, RateWaitTooLong, RobotsCache
from .urls import host_of

# Redis could not take a task's writes, through no fault of the page: an outage, a failover, or a full
# Redis (maxmemory with noeviction; the operator shows RedisOutOfMemory). The task goes back unspent.
_REDIS_TROUBLE: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, QueueUnavailable, OutOfMemoryError)
log = logging.getLogger("trawl.worker")

MAX_DEFERRALS = 5  # Retry-After releases of one task (seen by this worker) before its attempts are spent

# How often in-flight tasks are checked against cancelled (deleted) jobs.
CANCEL_CHECK_SECONDS = 1.0


def rss_mb() -> float | None:
    """This process's resident set size in MB (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


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
    allowed_cidrs: list[str] = field(default_factory=list)
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


@dataclass
class _Job:
    spec: WorkerJobSpec
    extractor: Extractor
    sink: Sink
    limits: FetchLimits
    headers: dict[str, str]


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        queue: QueueClient,
        redis: Redis,
        keys: Any,
        *,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.config = config
        self.queue = queue
        self.redis = redis
        self.keys = keys
        self.worker_id = config.worker_id
        self.metrics = metrics or WorkerMetrics()
        self.allowed: tuple[IPNetwork, ...] = parse_networks(config.allowed_cidrs)
        self.fetcher = Fetcher(allowed=self.allowed, max_connections=max(64, config.concurrency * 2))
        self.limiter = DomainLimiter(
            redis, keys.rate_limit, self.worker_id, max_wait=config.max_rate_wait, on_wait=self._on_rate_wait
        )
        self.robots = RobotsCache(
            redis,
            lambda origin: keys.rate_limit(origin, "robots"),
            self._fetch_robots,
            unavailable_seconds=config.robots_unavailable_seconds,
        )
        self.notes = JobNotes(redis, keys.job)
        self.breaker = CircuitBreaker(
            redis,
            lambda domain: keys.rate_limit(domain, "cb"),
            self.worker_id,
            threshold=config.breaker_failures,
            open_seconds=config.breaker_open_seconds,
        )
        self.parser = ParsePool(
            config.parse_processes,
            ParseLimits(
                config.parse_seconds, config.parse_max_bytes, config.parse_max_tags, config.parse_inline_max_tags
            ),
        )
        self._jobs: OrderedDict[str, _Job | None] = OrderedDict()
        self._deferred: OrderedDict[tuple[str, str], int] = OrderedDict()  # Retry-After releases per task
        self._sinks: dict[tuple[Any, ...], Sink] = {}
        self._inflight: dict[asyncio.Task[None], Task] = {}
        self._buffer: deque[Task] = deque()  # claimed, waiting for a slot (see trawl.queue.claimsize)
        self._task_time = TaskTimer()  # how long a task holds its slot, which sizes claims
        self._slot_free = asyncio.Event()
        self._stop = asyncio.Event()
        # Held around a claim (until its tasks are registered here) and around a heartbeat, so the held
        # list a heartbeat sends never misses tasks of a claim whose reply is on its way.
        self._lease_lock = asyncio.Lock()
        self._evicted = False
        self._wake = asyncio.Event()  # new local work (links enqueued) or stop: poll the queue now
        self.stopping = False
        self.cordoned = False  # the autoscaler wants this pod to empty: claim nothing new (claim or heartbeat)
        self.processed = 0
        self._started = time.monotonic()
        self._tick = self._heartbeat_ok = self._started  # the loop last ran / a heartbeat was last sent
        self.recycled: str | None = None  # why the worker stopped itself to be replaced, if it did
        self.finisher = Finisher(
            queue,
            self.worker_id,
            self.metrics,
            on_finished=self._finished,
            notes=self.notes,
            sink_retry_seconds=config.sink_retry_seconds,
            sink_backoff_first=config.sink_backoff_seconds,
        )
        self.finish_capacity = config.sink_capacity or 4 * config.concurrency
        self.renderer = Renderer(self.allowed, self.metrics.registry)  # starts Chromium on the first Browser task

    # --- lifecycle -----------------------------------------------------------------------------

    def request_stop(self) -> None:
        if not self.stopping:
            log.info("drain requested", extra={"worker": self.worker_id, "in_flight": len(self._inflight)})
            self.stopping = True
            self.metrics.draining.set(1)
            self._stop.set()
            self._wake.set()
            self._slot_free.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    async def run(self) -> None:
        await self.fetcher.start()
        if self.config.metrics_port:
            self._serve_metrics(self.config.metrics_port, self.config.metrics_address)
        ticker = asyncio.create_task(self._tick_loop(), name="loop-tick")
        log.info(
            "worker started",
            extra={"worker": self.worker_id, "concurrency": self.config.concurrency, "prefix": self.config.prefix},
        )
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="heartbeat")
        cancel_watch = asyncio.create_task(self._cancel_watch_loop(), name="cancel-watch")
        self.finisher.start()
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            await self.finisher.close()
            for loop_task in (heartbeat, cancel_watch, ticker):
                loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await loop_task
            with contextlib.suppress(Exception):
                await self._heartbeat(draining=True)
            await self.limiter.release_all()
            for sink in self._sinks.values():
                await sink.close()
            await self.fetcher.close()
            await self.renderer.close()
            await self.parser.close()
            self.metrics.shutdown()
            log.info("worker stopped", extra={"worker": self.worker_id, "processed": self.processed})

    def _serve_metrics(self, port: int, address: str) -> None:
        """Serve /metrics, or say clearly why not and keep working without it.

        Exiting instead would restart the pod in a loop behind a Deployment the kubelet may still count
        as ready; without a listener the readiness probe (GET /metrics) fails, so the pod is visibly not
        ready while the error below says why, and tasks it claims are still done.
        """
        try:
            self.metrics.serve(port, address, live=self.liveness_problem)
        except OSError as exc:
            log.error(
                "metrics endpoint disabled: cannot listen on %s:%d (%s); this worker stays not ready. "
                "Free the port or set the pool's worker.metricsPort to a free one",
                address,
                port,
                exc.strerror or exc,
                extra={"worker": self.worker_id},
            )

    async def _drain(self) -> None:
        """Let in-flight tasks finish within the grace period; give the rest back."""
        deadline = time.monotonic() + max(0.0, self.config.drain_seconds - 1.0)
        await self._release_buffered()
        pending = set(self._inflight)
        if pending:
            log.info("draining", extra={"worker": self.worker_id, "in_flight": len(pending)})
            _done, pending = await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        if pending:
            log.info("releasing unfinished tasks", extra={"worker": self.worker_id, "count": len(pending)})
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=5.0)

    # --- loops ---------------------------------------------------------------------------------

    def held(self) -> list[tuple[str, str]]:
        """(job, task) of every lease this process holds: claimed, being processed, or handed to the finisher
        (including acks waiting for Redis to come back)."""
        tasks = [*self._buffer, *self._inflight.values(), *self.finisher.held()]
        return [(t.job_id, t.task_id) for t in tasks]

    async def _evict_previous(self) -> None:
        """Drop the leases of earlier processes of this pod (crash, OOM kill): nobody will finish them."""
        evict = getattr(self.queue, "evict_previous", None)
        if evict is None or self._evicted:
            return
        dropped, returned = await evict(self.config.pod, self.worker_id)
        self._evicted = True
        if dropped:
            log.info(
                "returned the leases of earlier processes of this pod",
                extra={"worker": self.worker_id, "incarnations": dropped, "tasks": returned},
            )

    async def _heartbeat(self, *, draining: bool) -> None:
        async with self._lease_lock:
            beat = await self.queue.heartbeat(
                self.worker_id, in_flight=self.in_flight, draining=draining, held=self.held()
            )
        await self._set_cordoned(beat.cordoned, "heartbeat")

    async def _set_cordoned(self, cordoned: bool, seen_by: str) -> None:
        """The autoscaler's cordon, as a claim (it starts) or a heartbeat (it starts or lifts) saw it."""
        if cordoned == self.cordoned:
            return
        log.info(
            "cordoned by the autoscaler: claiming nothing new" if cordoned else "uncordoned: claiming again",
            extra={"worker": self.worker_id, "in_flight": len(self._inflight), "seen_by": seen_by},
        )
        self.cordoned = cordoned
        self.metrics.cordoned.set(1 if cordoned else 0)
        if cordoned:
            await self._release_buffered()  # other workers start them now, not when a slot frees here
        self._wake.set()
        self._slot_free.set()

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self._evict_previous()
                await self._heartbeat(draining=self.stopping)
                await self.limiter.refresh()
            except Exception as exc:
                log.warning("heartbeat failed", extra={"worker": self.worker_id, "error": repr(exc)})
            # An attempt, failed or not, proves the loop beats; a Redis outage is not cured by a restart.
            self._heartbeat_ok = time.monotonic()
            await asyncio.sleep(self.config.heartbeat_seconds)

    async def _tick_loop(self) -> None:
        """Prove the event loop runs (read by /livez from the metrics thread) and recycle when due."""
        while True:
            self._tick = time.monotonic()
            self.metrics.set_open_circuits(self.breaker.open_domains())
            reason = self.recycle_reason()
            if reason is not None and not self.stopping:
                log.info("recycling the worker: draining, then exiting to be restarted", extra={"reason": reason})
                self.recycled = reason
                self.request_stop()
            await asyncio.sleep(1.0)

    def recycle_reason(self) -> str | None:
        """Why this process should be replaced by a fresh one (like Celery's max-tasks-per-child)."""
        cfg = self.config
        if cfg.max_tasks and self.processed >= cfg.max_tasks:
            return f"processed {self.processed} tasks (max_tasks {cfg.max_tasks})"
        if cfg.max_rss_mb:
            rss = rss_mb()
            if rss is not None and rss > cfg.max_rss_mb:
                return f"resident memory {rss:.0f} MB over max_rss_mb {cfg.max_rss_mb}"
        return None

    def liveness_problem(self) -> str | None:
        """Why the worker is not alive (None: alive). Called from the metrics thread, so it only reads."""
        now = time.monotonic()
        stalled = now - self._tick
        if stalled > self.config.loop_stall_seconds:
            return f"event loop has not run for {stalled:.0f}s"
        stale = self.config.heartbeat_stale_seconds or 12 * self.config.heartbeat_seconds
        since = now - self._heartbeat_ok
        if since > stale:
            return f"no heartbeat for {since:.0f}s"
        return None

    async def _cancel_watch_loop(self) -> None:
        """Stop work on jobs that were cancelled (deleted) while their tasks are in flight here.

        Cancellation removes a job's keys; its in-flight tasks would otherwise still be fetched (an ack
        is discarded, but the site is hit). One EXISTS per distinct in-flight job, once a second."""
        while True:
            await asyncio.sleep(CANCEL_CHECK_SECONDS)
            jobs = sorted({t.job_id for t in (*self._inflight.values(), *self._buffer)})
            if not jobs:
                continue
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for job_id in jobs:
                        pipe.exists(self.keys.job(job_id))
                    found = await pipe.execute()
            except Exception as exc:
                log.warning("cancel check failed", extra={"worker": self.worker_id, "error": repr(exc)})
                continue
            gone = {job_id for job_id, n in zip(jobs, found, strict=True) if not n}
            if not gone:
                continue
            for fut, task in list(self._inflight.items()):
                if task.job_id in gone:
                    fut.cancel()
            # Claimed and not started: dropped (the job's keys are gone, so there is nothing to give back).
            kept = [t for t in self._buffer if t.job_id not in gone]
            self._buffer.clear()
            self._buffer.extend(kept)
            for job_id in gone:
                self._jobs.pop(job_id, None)
            log.info("stopped tasks of cancelled jobs", extra={"worker": self.worker_id, "jobs": sorted(gone)})

    async def _claim_loop(self) -> None:
        idle = 0.01
        while not self.stopping:
            size = claim_size(
                ClaimState(
                    self.config.concurrency,
                    len(self._inflight),
                    len(self._buffer),
                    self.config.lease_seconds,
                    self._task_time.mean,
                ),
                self.config.claim_batch,
            )
            if size <= 0 or self.cordoned or self.finisher.count >= self.finish_capacity:
                self._slot_free.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self._slot_free.wait()
                continue
            cordoned = False
            async with self._lease_lock:
                try:
                    if not self._evicted:  # before the first claim: this pod's old leases go back first
                        await self._evict_previous()
                    tasks = await self.queue.claim(self.worker_id, size)
                except WorkerCordoned:
                    tasks, cordoned = [], True  # nothing leased
                except Exception as exc:
                    tasks = None
                    self.metrics.claim_calls.labels("error").inc()
                    log.warning("claim failed", extra={"worker": self.worker_id, "error": repr(exc)})
                for task in tasks or ():
                    if len(self._inflight) < self.config.concurrency:
                        self._start(task)
                    else:
                        self._buffer.append(task)  # starts as soon as a slot frees (see _done)
            if tasks is None:
                await self._sleep_unless_stopping(1.0)
                continue
            if cordoned:  # claims nothing until a heartbeat's reply lifts the cordon
                self.metrics.claim_calls.labels("cordoned").inc()
                await self._set_cordoned(True, "claim")
                continue
            if not tasks:
                self.metrics.claim_calls.labels("empty").inc()
                woken = await self._idle_wait(idle)
                idle = 0.01 if woken else min(idle * 2, self.config.idle_poll_max)
                continue
            idle = 0.01
            self.metrics.claim_calls.labels("tasks").inc()
            self.metrics.claims.inc(len(tasks))
            self.metrics.in_flight.set(self.in_flight)

    def _start(self, task: Task) -> None:
        t = asyncio.create_task(self._process(task))
        self._inflight[t] = task
        t.add_done_callback(self._done)

    async def _release_buffered(self) -> None:
        """Give back the claimed tasks that never started (stopping): at once, no attempt or stall spent.
        If Redis does not answer, the final heartbeat no longer lists them and the queue returns them."""
        tasks = list(self._buffer)
        self._buffer.clear()
        if tasks:
            log.info("giving back claimed tasks not started", extra={"worker": self.worker_id, "count": len(tasks)})
            await asyncio.gather(*(self.queue.release(t, self.worker_id) for t in tasks), return_exceptions=True)

    @property
    def in_flight(self) -> int:
        """Tasks this worker holds a lease on: claimed and waiting for a slot, being processed, or waiting for
        their results to be stored. A processing task that has returned is counted by the finisher (or its
        lease is settled) though its done-callback, which removes it from ``_inflight``, has not run yet:
        counting it there too reported up to ``concurrency`` tasks twice (to the heartbeat, so to the
        autoscaler's per-worker loads, and to the backpressure test's bound)."""
        running = sum(1 for t in self._inflight if not t.done())
        return len(self._buffer) + running + self.finisher.count

    def _finished(self, count: int) -> None:
        self.metrics.in_flight.set(self.in_flight)
        self._slot_free.set()
        self._wake.set()

    def _done(self, t: asyncio.Task[None]) -> None:
        self._inflight.pop(t, None)
        self.processed += 1
        if self._buffer and not self.stopping:
            self._start(self._buffer.popleft())
        self.metrics.in_flight.set(self.in_flight)  # the heartbeat's figure, not just the running slots
        self._slot_free.set()

    async def _idle_wait(self, seconds: float) -> bool:
        """Sleep until the next poll, or until this worker enqueued new links or is stopping (True)."""
        self._wake.clear()
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    def _on_rate_wait(self, domain: str, wait: float) -> None:
        self.metrics.rate_waits.inc(wait)

    # --- jobs and sinks ------------------------------------------------------------------------

    async def _job(self, job_id: str) -> _Job | None:
        if job_id in self._jobs:
            self._jobs.move_to_end(job_id)
            return self._jobs[job_id]
        raw = await self.queue.job_spec(job_id)
        job = self._build_job(raw) if raw is not None else None
        if job is not None:  # a missing spec is not cached: it may be registered a moment later
            self._jobs[job_id] = job
            while len(self._jobs) > 256:
                self._jobs.popitem(last=False)
        return job

    def _build_job(self, raw: dict[str, Any]) -> _Job:
        spec = parse_worker_spec(raw)
        req = spec.request
        limits = FetchLimits(
            max_bytes=req.max_response_bytes,
            max_redirects=req.max_redirects,
            connect_timeout=req.connect_timeout_seconds,
            read_timeout=req.timeout_seconds,
            total_timeout=req.timeout_seconds,
        )
        extractor = Extractor(spec.extract, need_links=spec.crawl is not None)
        return _Job(spec, extractor, self._sink_for(spec), limits, dict(req.headers))

    def _sink_for(self, spec: WorkerJobSpec) -> Sink:
        out = spec.output
        dedupe = self.keys.results_written
        if out.sink == SinkKind.JSON_LINES and out.json_lines is not None:
            directory = self.config.json_lines_dir or local_path(out.json_lines.directory)
            ident: tuple[Any, ...] = ("jsonl", directory)
            if ident not in self._sinks:
                self._sinks[ident] = JsonLinesSink(self.redis, dedupe, directory)
        elif out.sink == SinkKind.WEBHOOK and out.webhook is not None:
            ref = out.webhook.secret_ref
            # Never send unsigned when signing was asked for: a missing key fails the task before it is
            # fetched (class Internal, so dead-lettered with the reason; retry them once the key exists).
            secret = read_secret(ref.name, ref.key) if ref is not None else None
            ident = ("webhook", out.webhook.url, secret, out.webhook.batch_size)
            if ident not in self._sinks:
                self._sinks[ident] = WebhookSink(
                    self.redis,
                    dedupe,
                    out.webhook.url,
                    secret=secret,
                    batch_size=out.webhook.batch_size,
                    allowed=self.allowed,
                )
        elif out.sink == SinkKind.POSTGRESQL and out.postgres is not None:
            ref = out.postgres.password_secret_ref
            # As for the webhook: a missing password fails the task before it is fetched (Internal).
            password = read_secret(ref.name, ref.key).decode() if ref is not None else None
            from trawl.sinks.postgres import PostgresSink, target_from_spec  # psycopg: only for workers that use it

            target = target_from_spec(out.postgres, password)
            ident = ("postgres", target)
            if ident not in self._sinks:
                self._sinks[ident] = PostgresSink(target)
        elif out.sink == SinkKind.S3 and out.s3 is not None:
            from trawl.sinks import s3 as s3sink  # minio: only for workers that use it

            s3 = out.s3
            access_ref, secret_ref = s3.access_key_id_secret_ref, s3.secret_access_key_secret_ref
            s3_target = s3sink.target_from_spec(
                s3,
                read_secret(access_ref.name, access_ref.key).decode().strip(),
                read_secret(secret_ref.name, secret_ref.key).decode().strip(),
            )
            ident = ("s3", s3_target)
            if ident not in self._sinks:
                self._sinks[ident] = s3sink.S3Sink(self.redis, dedupe, s3_target)
        else:
            max_len = out.redis_stream.max_len if out.redis_stream is not None else 100_000
            ident = ("stream", max_len)
            if ident not in self._sinks:
                self._sinks[ident] = RedisStreamSink(
                    self.redis, self.keys.results, max_len=max_len, job_key=self.keys.job
                )
        return self._sinks[ident]

    # --- one task ------------------------------------------------------------------------------

    async def _fetch_robots(self, url: str, hook: Any) -> tuple[int, str]:
        result = await self.fetcher.fetch(
            url,
            limits=FetchLimits(max_bytes=512 * 1024, max_redirects=5, total_timeout=15.0, read_timeout=15.0),
            before_hop=hook,
        )
        return result.status, result.text()

    async def _process(self, task: Task) -> None:
        started = time.monotonic()
        outcome = "acked"
        try:
            outcome = await self._handle(task)
        except asyncio.CancelledError:
            outcome = "released"
            with contextlib.suppress(Exception):
                await asyncio.shield(self.queue.release(task, self.worker_id))
            raise
        except _REDIS_TROUBLE as exc:
            # Redis failed under the task (an outage, a cluster failover): not the page's fault, so no
            # attempt is spent. The task goes back if Redis answers by then, else its lease expires.
            log.warning(
                "Redis error while handling a task; giving it back", extra={"url": task.url, "error": repr(exc)}
            )
            outcome = "released"
            with contextlib.suppress(Exception):
                await self.queue.release(task, self.worker_id, delay=1.0)
        except Exception as exc:  # a bug must not lose the task: fail it as Internal
            log.exception("task crashed", extra={"worker": self.worker_id, "url": task.url})
            outcome = "failed"
            with contextlib.suppress(Exception):
                await self.queue.fail(task, self.worker_id, FailureClass.INTERNAL.value, f"{type(exc).__name__}: {exc}")
        finally:
            if outcome != "handed":  # handed-over tasks are counted by the finisher once acked or released
                self.metrics.outcomes.labels(outcome).inc()
            elapsed = time.monotonic() - started
            self._task_time.observe(elapsed)
            self.metrics.task_seconds.observe(elapsed)

    async def _handle(self, task: Task) -> str:
        job = await self._job(task.job_id)
        if job is None:
            log.warning("no spec for job; giving the task back", extra={"job": task.job_id, "url": task.url})
            await self.queue.release(task, self.worker_id, delay=2.0)
            return "released"
        spec = job.spec
        pol = spec.politeness
        domain = host_of(task.url)
        waited = 0.0  # time spent waiting for politeness (slot, robots, rate): not the site's latency

        async def before_hop(url: str) -> None:
            nonlocal waited
            t0 = time.monotonic()
            try:
                await self._before_hop(url, spec)
            finally:
                waited += time.monotonic() - t0

        verdict = await self.breaker.check(domain)
        if verdict.state == "open":
            # The domain is failing for everyone: wait for its probe without spending an attempt.
            self.metrics.deferrals.labels("circuit_open").inc()
            with contextlib.suppress(Exception):
                await self.notes.throttled(task.job_id, domain, verdict.reason, verdict.until)
            await self.queue.release(task, self.worker_id, delay=max(0.5, verdict.wait()))
            return "released"
        fetch_started = time.monotonic()
        render_info: dict[str, Any] = {}
        try:
            async with self.limiter.slots.slot(
                domain, pol.max_concurrency_per_domain, deadline=time.monotonic() + self.config.max_rate_wait
            ):
                waited = time.monotonic() - fetch_started
                if spec.render is not None and spec.render.applies(task.url):  # same limits, hooks, errors as a fetch
                    result, render_info = await self.renderer.render(
                        task.url, spec.render, job.limits, job.headers, spec.request.user_agent, before_hop
                    )
                else:
                    result = await self.fetcher.fetch(
                        task.url,
                        limits=job.limits,
                        headers=job.headers,
                        user_agent=spec.request.user_agent,
                        before_hop=before_hop,
                    )
            elapsed = time.monotonic() - fetch_started - waited
            if pol.adaptive_delay:
                self.limiter.adaptive(domain).observe(elapsed, False)
            await self.breaker.record(domain, True)
            self.metrics.fetches.labels("ok").inc()
            self.metrics.fetch_seconds.observe(elapsed)
            self.metrics.bytes.inc(len(result.body))
            self.metrics.wire_bytes.inc(result.wire_bytes)
        except RateWaitTooLong as exc:
            self.metrics.deferrals.labels("rate_limit").inc()
            await self.queue.release(task, self.worker_id, delay=max(exc.wait, 0.5))
            return "released"
        except BrowserCrashed as exc:
            return await self._browser_crashed(task, exc)
        except FetchError as exc:
            return await self._failed(task, job, domain, exc, time.monotonic() - fetch_started - waited)

        content_type = result.content_type + (f"; charset={result.charset}" if result.charset else "")
        try:
            page = await self.parser.extract(job.extractor, result.body, task.url, content_type=content_type)
        except ParseLimit as exc:
            # A page no parser should spend longer on: that URL alone fails, for good.
            self.metrics.parse_limits.inc()
            log.warning("parse limit", extra={"job": task.job_id, "url": task.url, "error": str(exc)})
            failed = await self.queue.fail(task, self.worker_id, FailureClass.PARSE_LIMIT.value, str(exc)[:1024])
            return "dead" if failed.dead_lettered else "failed"
        links: list[str] = []
        if spec.crawl is not None and page.links:
            links = spec.crawl.select(page.links, task.url, task.depth, self.finisher.submitted(task.job_id))
        record = None
        if page.matched:
            data: dict[str, Any] = {
                "key": record_key(task.job_id, task.url),
                "job": task.job_id,
                "url": task.url,
                "finalUrl": result.final_url,
                "status": result.status,
                "depth": task.depth,
                "attempt": task.attempt,
                "fetchedAt": round(time.time(), 3),
                **page.data,
                **render_info,
            }
            record = Record(task.job_id, task.url, data)
        self.finisher.submit(Finish(task, links, record, job.sink))
        return "handed"

    async def _before_hop(self, url: str, spec: WorkerJobSpec) -> None:
        pol = spec.politeness

        async def robots_hop(hop_url: str) -> None:
            await self.limiter.rate.take_token(host_of(hop_url), pol.requests_per_second, adaptive=pol.adaptive_delay)

        rate = pol.requests_per_second
        if pol.respect_robots_txt:
            if not await self.robots.allowed(url, spec.request.user_agent, pol.robots_cache_seconds, robots_hop):
                raise FetchError(FailureClass.ROBOTS_DISALLOWED, f"robots.txt disallows {url}", url=url)
            crawl_delay = self.robots.crawl_delay(url, spec.request.user_agent)
            if crawl_delay:  # the site's Crawl-delay wins over a faster job rate
                rate = min(rate, 1.0 / crawl_delay)
        await self.limiter.rate.take_token(
            host_of(url),
            rate,
            adaptive=pol.adaptive_delay,
            deadline=time.monotonic() + self.config.max_rate_wait,
        )

    async def _browser_crashed(self, task: Task, exc: BrowserCrashed) -> str:
        """The browser died under the page: not the site's fault, so no attempt is spent and the domain is
        not slowed down; the task goes back at once (a page that crashes every browser fails after
        MAX_DEFERRALS such releases)."""
        key = (task.job_id, task.task_id)
        count = self._deferred.pop(key, 0) + 1
        self._deferred[key] = count
        if count <= MAX_DEFERRALS:
            self.metrics.deferrals.labels("browser_crash").inc()
            log.info("browser crashed; task given back", extra={"job": task.job_id, "url": task.url})
            await self.queue.release(task, self.worker_id, delay=0.5)
            return "released"
        outcome = await self.queue.fail(task, self.worker_id, exc.failure_class.value, exc.message[:1024])
        return "dead" if outcome.dead_lettered else "failed"

    async def _failed(self, task: Task, job: _Job, domain: str, exc: FetchError, elapsed: float) -> str:
        spec = job.spec
        cls = exc.failure_class
        self.metrics.fetches.labels(cls.value).inc()
        retryable_net = cls in (
            FailureClass.TIMEOUT,
            FailureClass.CONNECTION,
            FailureClass.HTTP_5XX,
            FailureClass.HTTP_429,
        )
        if spec.politeness.adaptive_delay:
            self.limiter.adaptive(domain).observe(elapsed, retryable_net)
        if cls in (FailureClass.TIMEOUT, FailureClass.CONNECTION, FailureClass.HTTP_5XX):
            await self.breaker.record(domain, False, f"{cls.value}: {exc.message}")
        elif cls in (FailureClass.HTTP_4XX, FailureClass.HTTP_429, FailureClass.BAD_CONTENT, FailureClass.TOO_LARGE):
            await self.breaker.record(domain, True)  # the site answered: it is up
        log_extra = {"job": task.job_id, "url": task.url, "error_class": cls.value, "error": exc.message}
        if cls == FailureClass.ROBOTS_DISALLOWED and task.depth > 0:
            # A link the crawl found that robots.txt forbids is not a failure of the job: it is recorded
            # as skipped (count and sample on the job's status) and acked. A listed seed stays a dead letter.
            await self.notes.skip(task.job_id, task.task_id, task.url, exc.message)
            self.metrics.skipped.labels(cls.value).inc()
            log.info("skipped", extra=log_extra)
            self.finisher.submit(Finish(task, [], None, None))
            return "handed"
        honor = (
            cls in (FailureClass.HTTP_429, FailureClass.HTTP_5XX)
            and exc.retry_after is not None
            and spec.retry.honor_retry_after
        )
        if honor:
            key = (task.job_id, task.task_id)
            count = self._deferred.pop(key, 0) + 1
            self._deferred[key] = count
            while len(self._deferred) > 10_000:
                self._deferred.popitem(last=False)
            if count <= MAX_DEFERRALS:
                # Retry-After: give the task back for that long; no attempt is spent, no lease held meanwhile
                self.metrics.deferrals.labels("retry_after").inc()
                log.info("deferred by Retry-After", extra={**log_extra, "delay": exc.retry_after})
                await self.queue.release(task, self.worker_id, delay=exc.retry_after or 0.0)
                return "released"
            # a site that answers Retry-After for ever: from now on each answer spends an attempt
        outcome = await self.queue.fail(
            task, self.worker_id, cls.value, exc.message[:1024], retry_after=exc.retry_after if honor else None
        )
        log.info("fetch failed", extra={**log_extra, "attempt": task.attempt, "dead": outcome.dead_lettered})
        return "dead" if outcome.dead_lettered else "failed"
