"""The queue's data types and its client contract, shared by the operator, the workers and tests.

The implementation is :class:`trawl.queue.client.Queue`; this module only says what crosses the
boundary so the worker, the operator and the autoscaler can rely on it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from .bloom import BloomSize


class RetryPolicy(NamedTuple):
    """A job's resolved retry policy as the queue applies it (see trawl.api.policies.ResolvedRetry)."""

    max_attempts: int = 3
    backoff: str = "Exponential"  # or "Fixed"
    initial_delay: float = 1.0
    max_delay: float = 300.0
    jitter: float = 0.2
    retry_on: tuple[str, ...] = ("Timeout", "Connection", "HTTP429", "HTTP5xx", "Stalled")
    honor_retry_after: bool = True


@dataclass(frozen=True, slots=True)
class JobConfig:
    """What the queue needs to know about a job; registered once, before its first enqueue."""

    job_id: str  # the ScrapeJob's metadata.uid: stable across renames, unique across re-creations
    priority: int = 5  # 0..9, higher first
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_pages: int | None = None  # crawl mode: the exact cap on tasks the job may ever hold
    max_depth: int = 0
    dedupe_across_jobs: bool = False
    dedupe_window_seconds: int = 3600
    # The job's seeds may repeat (urls beside urlRanges, ranges that may overlap): the queue drops
    # repeats by a digest per seed, as for crawl links, so the operator need not remember the seeds.
    dedupe_seeds: bool = False
    # Dead letters whose records are kept (None: all); beyond it the oldest records are dropped, and
    # counted (JobStats.dead_dropped): the dead count itself never shrinks.
    max_dead_letters_kept: int | None = None
    # Everything the workers need to process the job's tasks (resolved request/politeness/extract/
    # crawl/output settings), stored as JSON so workers never talk to the Kubernetes API.
    spec: dict[str, Any] = field(default_factory=dict)
    # Who submitted the job (the ScrapeJob's namespace, or the Namespace label the pool names): claims are
    # shared by weight among the tenants with ready work, and each tenant's quotas bound what it claims.
    tenant: str = ""
    # A crawl's probabilistic dedupe (spec.crawl.bloomFilter; None: exact), fixed at creation.
    bloom: BloomSize | None = None


# A refresh job's sweep (trawl.worker.sweep): a task no page or sitemap can make (links enter at depth >= 1,
# sitemaps at -1..-3), whose URL carries the page state's scan cursor.
SWEEP_DEPTH = -9
SWEEP_SCHEME = "trawl-sweep:"
# A run with more dead letters than this is not swept (their URLs, which are not gone, are read per step).
SWEEP_MAX_DEAD = 50_000


def sweep_url(cursor: str) -> str:
    return f"{SWEEP_SCHEME}{cursor}"


def sweep_cursor(task: Task) -> str | None:
    """The scan cursor of a sweep task; None for any other task."""
    if task.depth != SWEEP_DEPTH or not task.url.startswith(SWEEP_SCHEME):
        return None
    return task.url[len(SWEEP_SCHEME) :]


@dataclass(slots=True)
class Task:
    """A claimed task. ``attempt`` counts from 1; ``depth`` is 0 for seeds."""

    job_id: str
    task_id: str
    url: str
    depth: int
    attempt: int
    lease_deadline: float  # unix seconds


class FailOutcome(NamedTuple):
    dead_lettered: bool
    retry_at: float | None  # unix seconds, when rescheduled


class DeadLetterRecord(NamedTuple):
    task_id: str
    url: str
    attempts: int
    error_class: str
    message: str
    time: float
    history: list[dict[str, Any]]  # one entry per failed attempt: {attempt, errorClass, message, time}


class JobStats(NamedTuple):
    """Per-job counters, read without scanning. pending+in_flight+retrying+succeeded+dead == total."""

    total: int
    pending: int
    in_flight: int
    retrying: int
    succeeded: int
    dead: int
    enqueue_done: bool  # the seed enqueue finished (crawl links may still be discovered)
    suspended: bool
    first_claim_at: float | None
    exists: bool = True  # False when the job was never registered or was cancelled/expired
    finished_at: float | None = None  # when its last task was acked or dead-lettered (the queue's "fin")
    dead_dropped: int = 0  # dead letters whose records were dropped (the oldest beyond the job's cap)
    # A refresh job's pages by label (trawl.queue.pagestate): new, changed, unchanged, gone.
    changes: tuple[int, int, int, int] = (0, 0, 0, 0)
    from_sitemaps: int = 0  # page URLs sitemaps added (each counted once, in total too)
    not_revisited: int = 0  # a refresh job's pages adaptive revisits left alone (not in changes)
    possibly_skipped: float = 0.0  # a crawl's Bloom filter: new URLs expected to have been taken as seen
    bloom: BloomSize | None = None  # the crawl's Bloom filter, if it has one

    @property
    def finished(self) -> bool:
        return self.exists and self.enqueue_done and self.pending == self.in_flight == self.retrying == 0


class PoolSignals(NamedTuple):
    """A snapshot of a pool's queue for the autoscaler; counters are monotonic, rates are the caller's job."""

    ready: int
    delayed: int
    delayed_due_soon: int  # delayed tasks due within the next few seconds
    in_flight: int
    dead: int
    completed_total: int
    failed_total: int  # failed attempts (retried or dead-lettered)
    service_seconds_total: float  # summed claim-to-finish time of completed and failed attempts
    workers: dict[str, WorkerActivity]
    time: float
    enqueued_total: int = 0  # new tasks enqueued so far (seeds and discovered links, not retries)
    # Ready tasks of tenants their quota holds back now: not in ``ready`` (more workers would not run them).
    held: int = 0


class TenantLimits(NamedTuple):
    """What one tenant may use of a pool, as the claim script enforces it (None: no limit)."""

    weight: int = 1  # its share of claims while several tenants have ready work (work-conserving)
    max_in_flight: int | None = None  # tasks leased at once, across the tenant's jobs
    requests_per_second: float | None = None  # tasks claimed per second (a token bucket holding 1 s)
    pages_per_day: int | None = None  # tasks claimed per UTC day (every attempt counts)
    # Tasks ready or delayed at once, across the tenant's jobs: seeds wait in their job's seed stream
    # beyond it (links a crawl finds are bounded by its maxPages, not by this).
    max_queued: int | None = None
    # Seconds of browser page time per UTC day. Not enforced by the claim script (it would have to skip the
    # tenant's browser jobs inside its ring): the operator holds the tenant's browser jobs once the day's sum
    # (TenantUsage.browser_seconds_today) reaches it. In the table so every reader sees one row per tenant.
    browser_seconds_per_day: float | None = None


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """A pool's tenants as the queue sees them. Tenants not listed get ``default``."""

    tenants: dict[str, TenantLimits] = field(default_factory=dict)
    default: TenantLimits = field(default_factory=TenantLimits)
    # A priority level with ready work that no claim served for this long is served first by the next
    # claim (aging): the lowest class waits at most about this long behind higher ones.
    aging_seconds: float = 300.0


class TenantUsage(NamedTuple):
    """One tenant's use of a pool, read from the queue (the pool's status, metrics, ``trawl top``)."""

    tenant: str
    weight: int
    in_flight: int
    claimed_total: int  # tasks claimed since the tenant first claimed (monotonic)
    pages_today: int  # tasks claimed this UTC day
    queued: int = 0  # tasks ready or delayed
    # The quota that held the tenant's ready work back at its latest claim ("inFlight",
    # "requestsPerSecond", "pagesPerDay"), with the figure ("12/12 in flight") and since when; None when
    # its last claim took what was there.
    throttled: str | None = None
    throttled_message: str = ""
    throttled_since: float | None = None
    # The URLs-queued quota stopped the tenant's seeds at their latest enqueue ("1000/1000 URLs queued"):
    # its jobs wait to enqueue the rest, which claims do not see (held apart from ``throttled``).
    queue_full_message: str = ""
    queue_full_since: float | None = None
    # Seconds the tenant's browser tasks held a browser page this UTC day (every attempt), as the workers
    # flushed them (add_browser_seconds: at most about a second behind).
    browser_seconds_today: float = 0.0


class WorkerActivity(NamedTuple):
    worker_id: str
    in_flight: int
    last_seen: float
    draining: bool = False


class Heartbeat(NamedTuple):
    """A heartbeat's reply."""

    held: int  # leases the worker holds afterwards
    cordoned: bool = False  # the autoscaler cordoned the worker's pod: claim nothing new until it lifts


class QueueClient(Protocol):
    """The operations every part of Trawl uses. All are atomic (one Lua script each)."""

    async def register_job(self, job: JobConfig) -> None: ...

    async def enqueue(self, job_id: str, urls: Sequence[str], *, start_index: int | None = None) -> int:
        """Enqueue seed URLs (depth 0). With ``start_index`` idempotent per (job, index): re-running after a
        crash adds nothing twice; without it, appended after the seeds already there. Returns how many
        were newly added."""
        ...

    async def seeds_enqueued(self, job_id: str) -> int:
        """How far the job's seed stream is enqueued: the position the next :meth:`enqueue_seeds` takes."""
        ...

    async def enqueue_seeds(self, job_id: str, position: int, urls: Sequence[str]) -> int:
        """The seeds at ``position`` onwards of the job's seed stream, a batch at a time: idempotent per
        position, so a caller that restarts where :meth:`seeds_enqueued` says adds only what is missing.
        Returns how many were newly added."""
        ...

    async def mark_enqueue_done(self, job_id: str) -> None: ...

    async def enqueue_discovered(self, parent: Task, urls: Sequence[str]) -> int:
        """Crawl mode: add links found on ``parent``'s page at depth+1, deduplicated within the job and
        never beyond max_pages in total. Returns how many were added."""
        ...

    async def enqueue_sitemap(self, job_id: str, depth: int, urls: Sequence[str]) -> int:
        """Sitemap seeds: page URLs a sitemap named (``depth`` 0, counted in :attr:`JobStats.from_sitemaps`)
        or sitemaps (-1: the job's own; -2, -3: named by an index a level up; a task with a negative depth is
        a sitemap). Deduplicated within the job, never beyond its task cap. Returns how many were added."""
        ...

    async def enqueue_sweep(self, job_id: str, cursor: str = "0", *, first: bool = True) -> int:
        """A refresh job's sweep task (depth :data:`SWEEP_DEPTH`, URL :func:`sweep_url`): the operator's
        first once the job's own work is done (once per job), or a worker's continuation at ``cursor``.
        Returns 1 added, 0 not, -1 no such job, -2 / -3 not swept: the task cap was reached / cross-job
        dedupe skips pages (the run did not cover its whole scope)."""
        ...

    async def claim(self, worker_id: str, count: int) -> list[Task]:
        """Lease up to ``count`` tasks; raises :class:`~trawl.queue.errors.WorkerCordoned` (nothing leased)
        when the worker's pod is cordoned."""
        ...

    async def heartbeat(
        self,
        worker_id: str,
        *,
        in_flight: int,
        draining: bool = False,
        held: Iterable[tuple[str, str]] | None = None,
    ) -> Heartbeat:
        """Extend the worker's leases; with ``held`` (job id, task id), leases not listed are returned to
        their jobs (orphans). Returns how many leases the worker holds and whether its pod is cordoned."""
        ...

    async def ack(self, task: Task, worker_id: str) -> bool:
        """Success. False when the lease was lost (expired and re-claimed, or the job was cancelled)."""
        ...

    async def fail(
        self, task: Task, worker_id: str, error_class: str, message: str, *, retry_after: float | None = None
    ) -> FailOutcome: ...

    async def release(self, task: Task, worker_id: str, *, delay: float = 0.0) -> bool:
        """Give the task back without spending an attempt, optionally not before ``delay`` seconds."""
        ...

    async def job_stats(self, job_id: str) -> JobStats: ...

    async def job_spec(self, job_id: str) -> dict[str, Any] | None: ...

    async def dead_letters(self, job_id: str, limit: int = 100) -> list[DeadLetterRecord]: ...

    async def requeue_dead(self, job_id: str, task_ids: Sequence[str] | None = None) -> int: ...

    async def suspend(self, job_id: str) -> None: ...

    async def resume(self, job_id: str) -> None: ...

    async def cancel(self, job_id: str) -> None:
        """Delete every key of the job (tasks, counters, dead letters, results); late acks are discarded."""
        ...

    async def expire_job(self, job_id: str, ttl_seconds: int) -> None:
        """Retention: every key of the finished job expires after ``ttl_seconds``."""
        ...

    async def pool_signals(self) -> PoolSignals: ...

    async def enqueued_total(self) -> int:
        """New tasks enqueued so far (:attr:`PoolSignals.enqueued_total`), read cheaply between polls."""
        ...

    async def set_tenant_policy(self, policy: TenantPolicy) -> None:
        """Replace the pool's tenant weights, quotas and aging bound (the operator writes it every pool poll)."""
        ...

    async def tenant_usage(self) -> list[TenantUsage]:
        """Every tenant that claimed or holds ready work: weight, in flight, claims, and what throttles it."""
        ...

    async def add_browser_seconds(self, seconds: Mapping[str, float]) -> int:
        """Count browser page time (job id -> seconds) against each job and its tenant's day; jobs that are
        gone are ignored. Returns how many jobs counted it."""
        ...

    async def set_cordoned(self, pods: Collection[str], ttl_seconds: float) -> None:
        """The autoscaler's cordon: workers of these pods claim nothing new (their next claim raises
        :class:`WorkerCordoned`; their heartbeat's reply says when it lifts); replaces the previous set,
        which expires after ``ttl_seconds`` unless written again."""
        ...
