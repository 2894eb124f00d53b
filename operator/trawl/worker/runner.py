"""The worker process: the claim loop and its sizing, the heartbeat loop, the autoscaler's cordon,
cancelled jobs, the graceful drain, recycling, and the accounting of the leases it holds.

Each claimed task runs as its own asyncio task through :class:`~.pipeline.TaskPipeline` (at most
``concurrency`` at once; claimed tasks beyond that wait in a buffer sized by
:mod:`trawl.queue.claimsize`) and ends handed to the :class:`~.finish.Finisher`, given back or failed.
:class:`~.config.WorkerConfig` and :func:`~.config.default_worker_id` are re-exported: tests and
`trawl run` import them from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import deque
from typing import Any

from redis.asyncio import Redis

from trawl.egress.addresses import IPNetwork, parse_networks
from trawl.queue.claimsize import ClaimState, TaskTimer, claim_size
from trawl.queue.errors import WorkerCordoned
from trawl.queue.model import QueueClient, Task
from trawl.queue.notes import JobNotes
from trawl.queue.pagestate import PageStates
from trawl.worker.browser.hook import Renderer
from trawl.worker.browser.usage import FLUSH_SECONDS

from .breaker import CircuitBreaker
from .config import WorkerConfig, default_worker_id
from .fetch import Fetcher
from .finish import Finisher
from .jobcache import JobCache
from .jobsinks import JobSinks
from .metrics import WorkerMetrics
from .parsepool import ParseLimits, ParsePool
from .pipeline import TaskPipeline
from .politeness import DomainLimiter, RobotsCache
from .politeness.parking import MAX_PARKED_PER_PLACE, lease_room
from .politeness.rate import before_send
from .politeness.robots import fetch_with
from .wakeup import PoolEvents

__all__ = ["Worker", "WorkerConfig", "default_worker_id"]

log = logging.getLogger("trawl.worker")

# How often in-flight tasks are checked against cancelled (deleted) jobs; an ack Redis refused (the job's keys
# gone, or a lease lost) brings the next check forward, at most one such check per CANCEL_CHECK_MIN_SECONDS.
CANCEL_CHECK_SECONDS = 1.0
CANCEL_CHECK_MIN_SECONDS = 0.05
BROWSER_TIME_FLUSH_SECONDS = FLUSH_SECONDS


def rss_mb() -> float | None:
    """This process's resident set size in MB (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


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
        # Read when scraped: computing it is a pass over the running tasks, which every task's end paid for
        # when the gauge was set there (1.2 s of a 31.6 s profile at 1,000 hosts, 256 places).
        self.metrics.in_flight.set_function(lambda: self.in_flight)
        self.allowed: tuple[IPNetwork, ...] = parse_networks(config.allowed_cidrs)
        self.fetcher = Fetcher(
            allowed=self.allowed, max_connections=max(64, config.concurrency * 2), before_send=before_send
        )
        self.limiter = DomainLimiter(
            redis, keys.rate_limit, self.worker_id, max_wait=config.max_rate_wait, on_wait=self.metrics.rate_waited
        )
        self.limiter.rate.on_late = self.metrics.sent_late  # the extra round trips of late requests (.rate)
        self.limiter.crowded = self._crowded  # no head-of-line blocking when places are wanted (politeness.backlog)
        self.limiter.parking.on_park = self._parked  # a task waiting for its domain gives its place (.parking)
        self.limiter.parking.place = self._place_back  # and takes one back when its wait ends
        self.robots = RobotsCache(
            redis,
            lambda origin: keys.rate_limit(origin, "robots"),
            fetch_with(self.fetcher),
            unavailable_seconds=config.robots_unavailable_seconds,
        )
        self.notes = JobNotes(redis, keys.job)
        self.pages = PageStates(redis, keys)  # refresh jobs' page state, on the home shard with the notes
        self.breaker = CircuitBreaker(
            redis,
            lambda domain: keys.rate_limit(domain, "cb"),
            self.worker_id,
            threshold=config.breaker_failures,
            open_seconds=config.breaker_open_seconds,
        )
        if self.breaker.enabled:  # a slot's lease reads the breaker too: one round trip for both (.politeness.slots)
            self.limiter.slots.breaker_key = self.breaker.key
            self.limiter.slots.breaker_seen = self.breaker.seen
        self.parser = ParsePool(
            config.parse_processes,
            ParseLimits(
                config.parse_seconds, config.parse_max_bytes, config.parse_max_tags, config.parse_inline_max_tags
            ),
        )
        self.sinks = JobSinks(
            redis, keys, self.allowed, config.json_lines_dir, postgres_cleartext=config.postgres_cleartext_password
        )
        self.jobs = JobCache(queue, self.sinks.for_spec)
        self._inflight: dict[asyncio.Task[None], Task] = {}
        self._buffer: deque[Task] = deque()  # claimed, waiting for a slot (see trawl.queue.claimsize)
        self._task_time = TaskTimer()  # how long a task holds its slot, which sizes claims
        self._slot_free = asyncio.Event()
        self._place_free = asyncio.Event()  # a place freed: parked tasks whose wait ended may take it
        self._stop = asyncio.Event()
        # Held around a claim (until its tasks are registered here) and around a heartbeat, so the held
        # list a heartbeat sends never misses tasks of a claim whose reply is on its way.
        self._lease_lock = asyncio.Lock()
        self._evicted = False
        self._wake = asyncio.Event()  # new local work (links enqueued) or stop: poll the queue now
        self._cancel_soon = asyncio.Event()  # an ack was refused: look for cancelled jobs now
        self.pool_events = PoolEvents(redis, keys.events)  # a job's event: an idle worker polls now (wakeup)
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
            on_refused=self._cancel_soon.set,
            notes=self.notes,
            pages=self.pages,
            sink_retry_seconds=config.sink_retry_seconds,
            sink_backoff_first=config.sink_backoff_seconds,
        )
        self.finish_capacity = config.sink_capacity or 4 * config.concurrency
        self.renderer = Renderer(self.allowed, self.metrics.registry)  # starts Chromium on the first Browser task
        self.pipeline = self._pipeline()

    def _pipeline(self) -> TaskPipeline:
        """The path of one task through this worker's parts."""
        return TaskPipeline(
            queue=self.queue,
            worker_id=self.worker_id,
            metrics=self.metrics,
            jobs=self.jobs,
            breaker=self.breaker,
            limiter=self.limiter,
            robots=self.robots,
            fetcher=self.fetcher,
            renderer=self.renderer,
            parser=self.parser,
            finisher=self.finisher,
            notes=self.notes,
            task_time=self._task_time,
            max_rate_wait=self.config.max_rate_wait,
            pages=self.pages,
        )

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
        browser_time = asyncio.create_task(self._browser_time_loop(), name="browser-time")
        self.finisher.start()
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            await self.finisher.close()
            for loop_task in (heartbeat, cancel_watch, ticker, browser_time):
                loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await loop_task
            with contextlib.suppress(Exception):
                await self._heartbeat(draining=True)
            with contextlib.suppress(Exception):  # the page time of the last renders (the loop is stopped)
                await self.renderer.time.flush(self.queue.add_browser_seconds)
            with contextlib.suppress(Exception):  # the last requests' proxy use
                await self.pipeline.proxy_usage.flush(self.redis, self.keys.proxy_usage)
            await self.limiter.release_all()
            with contextlib.suppress(Exception):  # the open WARC files are published (trawl.worker.archiving)
                await self.pipeline.archives.close()
            await self.sinks.close()
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
                await self.pipeline.archives.flush_due()  # WARC files old enough are published
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

    async def _browser_time_loop(self) -> None:
        """Send the browser page time measured here (tenants' browserSecondsPerDay) about once a second: what
        a worker that dies has not sent is at most that second's (plus a failed send's, kept for the next)."""
        while True:
            await asyncio.sleep(BROWSER_TIME_FLUSH_SECONDS)
            try:
                await self.renderer.time.flush(self.queue.add_browser_seconds)
            except Exception as exc:
                log.warning("sending browser time failed", extra={"worker": self.worker_id, "error": repr(exc)})
            try:  # each proxy's use, for the pool's status (trawl.queue.proxyusage)
                await self.pipeline.proxy_usage.flush(self.redis, self.keys.proxy_usage)
            except Exception as exc:
                log.warning("sending proxy use failed", extra={"worker": self.worker_id, "error": repr(exc)})

    async def _cancel_watch_loop(self) -> None:
        """Stop work on jobs that were cancelled (deleted) while their tasks are in flight here.

        Cancellation removes a job's keys; its in-flight tasks would otherwise still be fetched (an ack
        is discarded, but the site is hit). One EXISTS per distinct in-flight job, once a second, and sooner
        after an ack Redis refused: the first task of a deleted job to finish here tells (its ack is refused),
        and its job's other requests stop then rather than up to a second later."""
        while True:
            try:
                async with asyncio.timeout(CANCEL_CHECK_SECONDS):
                    await self._cancel_soon.wait()
            except TimeoutError:
                pass
            else:
                await asyncio.sleep(CANCEL_CHECK_MIN_SECONDS)  # acks refused together: one check
            self._cancel_soon.clear()
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
                self.jobs.forget(job_id)
            log.info("stopped tasks of cancelled jobs", extra={"worker": self.worker_id, "jobs": sorted(gone)})

    async def _claim_loop(self) -> None:
        idle = 0.01
        while not self.stopping:
            size = claim_size(
                ClaimState(
                    self.config.concurrency,
                    self._running(),
                    len(self._buffer),
                    self.config.lease_seconds,
                    self._task_time.mean,
                ),
                self.config.claim_batch,
            )
            # Parked tasks free places, not leases: every lease held here counts (politeness.parking).
            size = min(size, lease_room(self.config.concurrency, self.finish_capacity, self._leased()))
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
                    if self._place_for_claimed():
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

    def _crowded(self) -> bool:
        """Whether every place is taken, or a claimed task waits for one: a task waiting for its domain then
        holds a place another task could use; or parked tasks are at their bound."""
        return (
            bool(self._buffer)
            or self._running() >= self.config.concurrency
            or self.limiter.parking.count >= MAX_PARKED_PER_PLACE * self.config.concurrency
        )

    def _running(self) -> int:
        """Tasks holding one of the worker's places: started, and not parked waiting for their domain."""
        return len(self._inflight) - self.limiter.parking.count

    def _leased(self) -> int:
        """Every lease held here (claimed, running, parked, finishing), counted without a pass over the tasks
        (a started task that returned may be counted by the finisher too: an over-count, on the safe side)."""
        return len(self._buffer) + len(self._inflight) + self.finisher.count

    def _place_for_claimed(self) -> bool:
        """Whether a claimed task may start now: a place is free and no parked task waits to take one back
        (those go first: they hold their domain's token or slot)."""
        return self._running() < self.config.concurrency and not self.limiter.parking.returning

    def _parked(self) -> None:
        """A task parked (politeness.parking): a task whose wait ended, else a claimed task, takes its place."""
        self._place_free.set()
        self._fill()
        self._slot_free.set()

    def _fill(self) -> None:
        """Start claimed tasks in the free places that no parked task waits for."""
        while self._buffer and not self.stopping and self._place_for_claimed():
            self._start(self._buffer.popleft())

    async def _place_back(self) -> None:
        """A parked task whose wait ended: return once it may hold a place again (it is counted as parked
        until then), so that ``concurrency`` bounds the requests in progress."""
        while self._running() >= self.config.concurrency:
            self._place_free.clear()
            await self._place_free.wait()
        # Once it is counted as running (right after this returns), places left over go to claimed tasks,
        # which waited while it was returning.
        asyncio.get_running_loop().call_soon(self._fill)

    def _start(self, task: Task) -> None:
        t = asyncio.create_task(self.pipeline.process(task))
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
        self._slot_free.set()
        self._wake.set()

    def _done(self, t: asyncio.Task[None]) -> None:
        self._inflight.pop(t, None)
        self.processed += 1
        self._place_free.set()
        self._fill()
        self._slot_free.set()

    async def _idle_wait(self, seconds: float) -> bool:
        """Sleep until the next poll, or until this worker enqueued new links or is stopping (True); a worker
        with nothing in hand also ends the wait on an entry of the pool's event stream (a job's seeds
        enqueued), returning False: the claim comes at once, and its back-off goes on if it finds nothing."""
        self._wake.clear()
        if not self._inflight and not self._buffer and not self.finisher.count:
            return await self._event_or_wake(seconds)
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    async def _event_or_wake(self, seconds: float) -> bool:
        """Up to ``seconds``, or until an entry of the pool's event stream or ``_wake`` (True: ``_wake``)."""
        woken = asyncio.ensure_future(self._wake.wait())
        event = asyncio.ensure_future(self.pool_events.wait(seconds))
        done, pending = await asyncio.wait({woken, event}, timeout=seconds + 1.0, return_when=asyncio.FIRST_COMPLETED)
        for waiter in pending:
            waiter.cancel()  # a cancelled read drops its connection; the next wait opens another
        await asyncio.gather(*pending, return_exceptions=True)
        return woken in done

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()
