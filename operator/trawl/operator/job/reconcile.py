"""ScrapeJob reconciliation: one idempotent pass from spec and queue counters to status.

Called by kopf on create, update, resume and a timer. Every pass re-derives everything from the
spec, the pool and Redis, so a restarted operator simply continues: enqueueing resumes at the
queue's own cursor, nothing is remembered in memory that the next pass would need.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import islice
from typing import Any

from pydantic import ValidationError
from redis.exceptions import OutOfMemoryError, RedisError

from trawl.api.common import parse_time, validation_message
from trawl.api.naming import ANNOTATION_RETRY_DEAD, GROUP, LABEL_CRON, RETRY_ALL_SUFFIX, VERSION
from trawl.api.policies import PERMANENT_CLASSES
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.api.tenancy import TenancyRefusal
from trawl.archive.admission import archive_problem, capture_directory, location_wire, source_directory
from trawl.egress.addresses import parse_networks
from trawl.jobspec.admission import (
    browser_missing,
    limit_exceeded,
    screenshot_without_browser,
    spec_problem,
    undeclared_secret_keys,
    unknown_proxy_group,
    unknown_session_seed,
    unmounted_directory,
    unmounted_secrets,
)
from trawl.jobspec.domains import effective_politeness, renders_in_browser
from trawl.jobspec.tenancy import (
    browser_quota_hold,
    browser_quota_of,
    place_job,
    pool_namespace,
    sharing_refusal,
    tenant_of,
    tenant_policy,
)
from trawl.jobspec.wire import refresh_lineage
from trawl.operator import kube
from trawl.operator.conditions import ConditionType, get_condition
from trawl.operator.connections import RedisConnections, pool_queue
from trawl.operator.events import Transition
from trawl.operator.indexes import PoolRef, namespace_labels, pool_from_index
from trawl.operator.memo import Memo, digest
from trawl.operator.problems import Problem
from trawl.operator.secrets import secret_reader
from trawl.queue import Queue, QueueUnavailable
from trawl.queue.model import SWEEP_MAX_DEAD, DeadLetterRecord, JobConfig, JobStats
from trawl.queue.notes import JobNotes, Skipped, Throttled
from trawl.redisconn.memory import out_of_memory
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from .oncomplete import hook_events, run_hooks
from .results import results_location, results_written
from .sinkcheck import SecretReader, finish_sink, sink_problem
from .status import TERMINAL, JobFacts, derive_job_status

log = logging.getLogger(__name__)


class NotAccepted(Exception):
    """Why the job cannot be registered (its sink, its pool's limits): the pass says so, Stalled."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclass
class JobOutcome:
    status: dict[str, Any]
    events: list[Transition] = field(default_factory=list)
    delete_object: bool = False
    queue: Queue | None = None  # the pool's queue, when its Redis answered (trawl.operator.job.endwatch reads it)


@dataclass(frozen=True)
class _Pass:
    """One pass over a job whose pool's Redis answered: what its steps read."""

    queue: Queue
    spec: ScrapeJobSpec
    pool: ScrapePoolSpec
    namespace: str
    # The pool's namespace: where its workers run, so where the Secrets they (and the operator, for the job)
    # read are. The job's own namespace when it names no poolNamespace.
    pool_namespace: str
    name: str
    uid: str
    generation: int
    prev: dict[str, Any]
    now: datetime
    read_secret: SecretReader
    namespace_labels: Mapping[str, str] | None
    # The quota that holds the job's tenant back, as its pool's status last said ("" when none does).
    tenant_throttled: str = ""
    # The URLs-queued quota that stops the tenant's seeds, as its pool's status last said ("" when none does).
    tenant_queue_full: str = ""
    # Why the pool (in another namespace) does not serve this job: refused before registration.
    not_shared: Problem | None = None
    # The job renders and its tenant's browser time today reached its browserSecondsPerDay: the quota's
    # figure, and the job is held (suspended in the queue, not in its spec); "" when it is not.
    browser_held: str = ""


def failed_job(generation: int, status: Mapping[str, Any], now: datetime, reason: str, msg: str) -> JobOutcome:
    """The status of a pass that failed unexpectedly: Stalled with the error (the queue is untouched)."""
    facts = JobFacts(generation=generation, suspend=False, problem=Problem(reason, msg))
    return JobOutcome(*derive_job_status(facts, dict(status), now))


def job_config(uid: str, spec: ScrapeJobSpec, pool: ScrapePoolSpec, lineage: str | None = None) -> JobConfig:
    from trawl.jobspec.wire import build_job_config

    config: JobConfig = build_job_config(uid, spec, pool, lineage)
    return config


def data_lost_message(prev: Mapping[str, Any], *, running: bool) -> str:
    """What a Redis that lost its data (restart without persistence, failover to a replica that had not
    caught up, a flush) means for one job, with what its status knew before."""
    counts = prev.get("counts") or {}
    known = f"{counts.get('succeeded', 0)} of {counts.get('total', 0)} URLs done"
    written = int((prev.get("results") or {}).get("count") or 0)
    if running:
        return (
            f"the pool's Redis lost this job's queue data ({known} before the loss; which ones is no longer "
            f"known): every seed URL is enqueued again, so pages may be fetched twice; records already written "
            f"to a sink outside Redis stay there"
        )
    gone = f"its {written} results in Redis are gone" if written else "its data in Redis is gone"
    return f"the pool's Redis lost this finished job's data ({known}): {gone}; the status keeps what was known"


# Seed batches one pass enqueues at most (of the queue's enqueue_batch, 2000): a million-URL range takes
# about ten passes, and a pass never holds the event loop or the job's lock for long.
SEED_BATCHES_PER_PASS = 50


async def _enqueue_seeds(queue: Queue, uid: str, spec: ScrapeJobSpec) -> int:
    """Enqueue the next part of the job's seed stream, from where the queue's cursor says: at most
    SEED_BATCHES_PER_PASS batches, each built from the spec when it is sent (a range is never expanded
    into a list), each idempotent per position, so a pass after a crash or a restart adds only what is
    missing. The job's tenant's URLs-queued quota may stop a batch short: the pass ends there and the next
    one goes on from the cursor. Once the stream is all in, enqueues the job's sitemaps and marks the
    enqueue done. Returns the positions enqueued so far."""
    end = spec.seed_count()
    position = await queue.seeds_enqueued(uid)
    stream = spec.seeds(position)
    for _ in range(SEED_BATCHES_PER_PASS):
        batch = list(islice(stream, queue.enqueue_batch))
        if not batch:
            break
        await queue.enqueue_seeds(uid, position, batch)
        reached = await queue.seeds_enqueued(uid)
        if reached < position + len(batch):
            return min(reached, end)  # the tenant's queue is full: its seeds wait in the stream
        position = reached
    if position >= end:
        # The sitemaps after the last seed (a job's task cap counts seeds first: what sitemaps add never
        # takes a seed's place); idempotent, the queue deduplicates them. Workers read them (depth -1).
        await queue.enqueue_sitemap(uid, -1, spec.sitemap_seeds())
        await queue.mark_enqueue_done(uid)
    return min(position, end)


# Validated job specs by (uid, digest of the spec), and admissions by what they derive from: kept across the
# passes of active jobs (each second) until a spec changes (trawl.operator.memo).
JOB_SPECS: Memo[ScrapeJobSpec] = Memo(4096)
ADMISSIONS: Memo[JobConfig | Problem] = Memo(4096)


def admit_memo(
    spec_key: tuple[str, str], spec: ScrapeJobSpec, pool: PoolRef, lineage: str | None
) -> JobConfig | Problem:
    """``admit``, once per job spec, pool spec and lineage (not kept for a pool whose generation is unknown)."""
    uid = spec_key[0]
    if pool.generation is None:
        return admit(uid, spec, pool.spec, lineage)
    return ADMISSIONS.get((*spec_key, pool.uid, pool.generation, lineage), lambda: admit(uid, spec, pool.spec, lineage))


def admit(uid: str, spec: ScrapeJobSpec, pool: ScrapePoolSpec, lineage: str | None = None) -> JobConfig | Problem:
    """The job's configuration on its pool, or why the pool cannot run it (no I/O). ``lineage``: a refresh
    job's page state (trawl.jobspec.wire.refresh_lineage)."""
    unmounted = unmounted_secrets(spec, pool)
    if unmounted:
        return Problem(
            "SecretNotMounted",
            f"the job names Secret {unmounted[0]!r}, which ScrapePool {spec.pool!r} does not "
            f"mount into its workers: add it to the pool's spec.worker.secrets",
        )
    undeclared = undeclared_secret_keys(spec, pool)
    if undeclared:
        return Problem("SecretKeyNotAllowed", undeclared[0])
    unmounted_dir = unmounted_directory(spec, pool)
    if unmounted_dir is not None:
        return Problem("DirectoryNotMounted", unmounted_dir)
    unknown_proxy = unknown_proxy_group(spec, pool)
    if unknown_proxy is not None:
        return Problem("UnknownProxyGroup", unknown_proxy)
    no_shot = screenshot_without_browser(spec, pool)
    if no_shot is not None:
        return Problem("ScreenshotNeedsBrowser", no_shot)
    unknown_seed = unknown_session_seed(spec, pool)
    if unknown_seed is not None:
        return Problem("UnknownSessionSeed", unknown_seed)
    no_browser = browser_missing(spec, pool)
    if no_browser is not None:
        return Problem("BrowserNotAvailable", no_browser)
    try:
        config = job_config(uid, spec, pool, lineage)
    except ValueError as exc:
        return Problem("InvalidSpec", f"spec combined with pool defaults is invalid: {exc}")
    unusable = spec_problem(config.spec)
    if unusable is not None:
        return Problem("InvalidSpec", unusable)
    return config


async def reconcile_job(
    *,
    name: str,
    namespace: str,
    uid: str,
    generation: int,
    spec_raw: Mapping[str, Any],
    status: Mapping[str, Any],
    annotations: Mapping[str, str],
    pool_index: Mapping[Any, Any],
    connections: RedisConnections,
    now: datetime,
    secrets: Mapping[Any, Any] | None = None,
    namespaces: Mapping[Any, Any] | None = None,
    job_labels: Mapping[str, str] | None = None,
) -> JobOutcome:
    """One pass over a job. ``secrets``: the operator's Secret index (None: no Secrets exist); ``namespaces``:
    its Namespace-labels index (read for a pool whose tenancy names a tenantLabel); ``job_labels``: the job's
    own (a CronScrapeJob's jobs share its refresh lineage)."""
    prev = dict(status)
    raw = dict(spec_raw)
    spec_key = (uid, digest(raw))
    try:
        spec = JOB_SPECS.get(spec_key, lambda: ScrapeJobSpec.model_validate(raw))
    except ValidationError as exc:
        facts = JobFacts(generation=generation, suspend=False, problem=Problem("InvalidSpec", validation_message(exc)))
        return JobOutcome(*derive_job_status(facts, prev, now))

    def stalled(problem: Problem) -> JobOutcome:
        facts = JobFacts(generation=generation, suspend=spec.suspend, problem=problem)
        return JobOutcome(*derive_job_status(facts, prev, now))

    pool_ns = pool_namespace(namespace, spec)
    pool = pool_from_index(pool_index, pool_ns, spec.pool)
    if isinstance(pool, Problem):
        return stalled(pool)
    labels = namespace_labels(namespaces, namespace)
    refusal = sharing_refusal(namespace, pool_ns, spec.pool, pool.spec.tenancy, labels)
    not_shared = Problem(refusal.reason, refusal.message) if refusal is not None else None
    config: JobConfig | None = None
    if not_shared is None:
        # Checked only for a job the pool serves: one it does not learns nothing of the pool's settings.
        lineage = refresh_lineage(namespace, name, spec, (job_labels or {}).get(LABEL_CRON))
        admitted = admit_memo(spec_key, spec, pool, lineage)
        if isinstance(admitted, Problem):
            return stalled(admitted)
        archive_refused = archive_problem(namespace, name, spec, pool.spec)
        if archive_refused is not None:  # trawl.archive.admission: the source is the author's, so hostile
            return stalled(Problem(*archive_refused))
        # A copy: the admission is kept across passes (ADMISSIONS), and these depend on the job's name too.
        archive: dict[str, Any] = {}
        if spec.archive is not None:  # where the workers write this job's WARC files, and their caps
            archive["archive"] = {
                **location_wire(capture_directory(namespace, name, pool.spec), pool.spec),
                "max_record_bytes": spec.archive.max_record_bytes,
                "max_file_bytes": spec.archive.max_file_bytes,
            }
        if spec.archive_source is not None:  # the directory it reads, checked above (no I/O, no path out)
            archive["archive_source"] = location_wire(source_directory(namespace, spec, pool.spec), pool.spec)
        config = replace(admitted, spec={**admitted.spec, **archive}) if archive else admitted
    try:
        redis = await connections.for_pool(pool_ns, spec.pool, pool.spec, secrets or {})
    except (RedisConfigError, RedisUnreachable) as exc:
        return stalled(not_shared or Problem("RedisUnavailable", str(exc)))

    queue = pool_queue(redis, pool_ns, spec.pool, pool.spec)
    tenant = tenant_of(namespace, pool.spec.tenancy, labels) if pool.spec.tenancy is not None else None
    throttled = pool.throttled.get(tenant, "") if isinstance(tenant, str) else ""
    queue_full = pool.queue_full.get(tenant, "") if isinstance(tenant, str) else ""
    # The day's browser time as the pool's status said at its last poll (no Redis read per job per pass), the
    # quota as the pool's spec says now: a quota raised releases the job at its next pass.
    browser_held = (
        browser_quota_hold(
            renders=renders_in_browser(spec, pool.spec),
            quota=browser_quota_of(pool.spec.tenancy, tenant),
            used_today=pool.browser_seconds.get(tenant, 0.0),
        )
        if isinstance(tenant, str)
        else ""
    )
    job = _Pass(
        queue, spec, pool.spec, namespace, pool_ns, name, uid, generation, prev, now, secret_reader(secrets or {}),
        labels, throttled, queue_full, not_shared, browser_held,
    )  # fmt: skip
    try:
        return replace(await _reconcile_with_queue(job, config, annotations), queue=queue)
    except NotAccepted as exc:
        return stalled(exc.problem)
    except OutOfMemoryError:  # Redis answers, but is full: every pass writes (the epoch), so each one says so
        return stalled(Problem(*await out_of_memory(redis)))
    except (QueueUnavailable, RedisError, OSError) as exc:
        connections.failed(pool_ns, spec.pool)
        return stalled(Problem("RedisUnavailable", f"Redis error: {type(exc).__name__}: {exc}"))


async def _reconcile_with_queue(job: _Pass, config: JobConfig | None, annotations: Mapping[str, str]) -> JobOutcome:
    """The pass once the pool's Redis answers: read the counters, register and steer the job in the queue,
    read what else was noted, derive the status, then what follows a finished job. ``config`` is None for a
    job the pool does not serve (``job.not_shared``): it is refused before anything of it is registered."""
    queue, uid, prev = job.queue, job.uid, job.prev
    epoch = await queue.epoch()
    stats: JobStats = await queue.job_stats(uid)
    data_lost = None
    if not stats.exists and prev.get("queueEpoch") not in (None, epoch):
        data_lost = data_lost_message(prev, running=prev.get("phase") not in TERMINAL)
    if not stats.exists and prev.get("phase") in TERMINAL:
        return _finished_record(job, epoch, data_lost)
    enqueued = prev.get("enqueued")
    registered = None
    politeness: dict[str, Any] | None = None
    if not stats.exists or not stats.enqueue_done:
        # A shared pool serves a tenant while its tenancy admits it, as tenancy is checked: until the job's
        # seeds are all in. A job accepted before runs on (its tasks are queued already).
        if job.not_shared is not None or config is None:
            raise NotAccepted(job.not_shared or Problem("PoolNotShared", "the pool does not serve this job"))
        stats, enqueued, config = await _register(job, config, stats)
        registered = (config.priority, config.tenant)
        politeness = effective_politeness(config.spec)
    deadline_exceeded = _deadline_exceeded(job.spec, prev, stats, job.now)
    stats, retry_handled = await _steer(job, stats, deadline_exceeded, annotations.get(ANNOTATION_RETRY_DEAD))
    if await _sweep_due(job, stats, deadline_exceeded):
        stats = await queue.job_stats(uid)  # unfinished again until the sweep is done

    notes = await _read_notes(job, stats)
    dead_letters: list[DeadLetterRecord] = []  # read only when their count changed
    if stats.dead and stats.dead != int((prev.get("counts") or {}).get("deadLettered", -1)):
        dead_letters = list(reversed(await queue.dead_letters(uid, limit=20)))
    facts = JobFacts(
        generation=job.generation,
        suspend=job.spec.suspend,
        stats=stats,
        deadline_exceeded=deadline_exceeded,
        max_dead_letters=job.spec.max_dead_letters,
        enqueued=enqueued,
        dead_letters=dead_letters,
        results=notes.results,
        epoch=epoch,
        data_lost=data_lost,
        retry_handled=retry_handled,
        problem=notes.problem,
        skipped=notes.skipped,
        skipped_sample=notes.skipped_sample,
        truncated=notes.truncated,
        blocked=notes.blocked,
        archive=notes.archive,
        throttled=notes.throttled,
        tenant_throttled=job.tenant_throttled,
        tenant_queue_full=job.tenant_queue_full,
        browser_quota=job.browser_held if not stats.finished else "",
        registered=registered,
        politeness=politeness,
    )
    new_status, events = derive_job_status(facts, prev, job.now)
    if not dead_letters and stats.dead and "deadLetters" in prev:
        new_status["deadLetters"] = prev["deadLetters"]
    events += await _after_the_job(job, new_status)
    return JobOutcome(new_status, events, _ttl_expired(job.spec, new_status, job.now))


async def _sweep_due(job: _Pass, stats: JobStats, deadline_exceeded: bool) -> bool:
    """A refresh job whose own work is done and that would succeed gets its sweep (trawl.worker.sweep: the
    lineage's pages the run never reached are reported gone) before it finishes; True when it was added
    now. Once per job (the queue refuses a second), and not for a run that did not cover its scope."""
    if job.spec.refresh is None or not stats.finished or deadline_exceeded or job.prev.get("phase") in TERMINAL:
        return False
    if stats.dead > job.spec.max_dead_letters or stats.dead > SWEEP_MAX_DEAD:
        return False
    return await job.queue.enqueue_sweep(job.uid) == 1


def _finished_record(job: _Pass, epoch: str, data_lost: str | None) -> JobOutcome:
    """Retention removed the queue data of a finished job (or Redis lost it: then say so): the status is
    the record now, never rewritten to claim less or more than it knew."""
    facts = JobFacts(generation=job.generation, suspend=job.spec.suspend, stats=None, epoch=epoch, data_lost=data_lost)
    kept, events = derive_job_status(facts, job.prev, job.now)
    for key in ("onComplete", "results"):  # the record of what happened after the job
        if key in job.prev and key not in kept:
            kept[key] = job.prev[key]
    return JobOutcome(kept, events)


async def _register(job: _Pass, config: JobConfig, stats: JobStats) -> tuple[JobStats, int, JobConfig]:
    """Register the job and enqueue its seeds (again: both are idempotent); (its counters now, seeds, the
    configuration registered: with its tenant and priority).

    Until its seeds are all in, a job is held to its pool's jobLimits and tenancy: one above them, or of a
    tenant the pool does not admit, is refused (Stalled: LimitExceeded, TenantNotAdmitted,
    PriorityAboveCeiling, ...) before anything of it is enqueued. A job whose seeds are in runs on as
    accepted, even if the pool's limits or tenants change later."""
    queue, uid, spec = job.queue, job.uid, job.spec
    exceeded = limit_exceeded(spec, job.pool)
    if exceeded is not None:
        raise NotAccepted(Problem("LimitExceeded", exceeded))
    placement = place_job(job.namespace, spec, job.pool, job.namespace_labels)
    if isinstance(placement, TenancyRefusal):
        raise NotAccepted(Problem(placement.reason, placement.message))
    if placement is not None:
        config = replace(config, tenant=placement.tenant, priority=placement.priority)
    if not stats.exists:
        # Accepting the job: its sink must be able to take the records before anything is fetched.
        problem = await sink_problem(
            job.pool_namespace,
            spec,
            job.read_secret,
            allowed=parse_networks(job.pool.worker.allowed_cidrs),
            cleartext_password=job.pool.worker.allow_cleartext_postgres_password,
        )
        if problem is not None:
            raise NotAccepted(problem)
        if job.pool.tenancy is not None:
            # The pool's tenant table before the job's first seed: a pool just created may not have polled
            # yet, and its quotas (URLs queued above all) hold from the first seed on.
            await queue.set_tenant_policy(tenant_policy(job.pool.tenancy))
    await queue.register_job(config)
    if (spec.suspend or job.browser_held) and not stats.suspended:
        # Before the first seed: a job created suspended (or held by its tenant's browser time) must never
        # enter the claim ring.
        await queue.suspend(uid)
    enqueued = await _enqueue_seeds(queue, uid, spec)
    return await queue.job_stats(uid), enqueued, config


async def _steer(
    job: _Pass, stats: JobStats, deadline_exceeded: bool, retry_value: str | None
) -> tuple[JobStats, str | None]:
    """Suspend or resume the job in the queue as its spec (or its deadline) says, and requeue its dead
    letters when the retry annotation changed: (its counters now, the annotation value handled)."""
    queue, uid = job.queue, job.uid
    # spec.suspend is the user's; the deadline and the browser quota suspend the job in the queue only.
    want_suspended = job.spec.suspend or deadline_exceeded or (bool(job.browser_held) and not stats.finished)
    if want_suspended and not stats.suspended:
        await queue.suspend(uid)
    elif not want_suspended and stats.suspended:
        await queue.resume(uid)
    retry_handled = job.prev.get("retryDeadLettersHandled")
    if retry_value is not None and retry_value != retry_handled:
        requeued = await _requeue_dead(queue, uid, stats.dead, include_permanent=retry_value.endswith(RETRY_ALL_SUFFIX))
        if requeued:
            # The job runs again: results it already wrote keep their dedupe set past the retention
            # its first finish set (the queue's own keys lose their TTL in requeue_dead).
            await queue.redis.persist(queue.keys.results_digests(uid))
            await queue.redis.persist(queue.keys.results_written(uid))
            await queue.redis.persist(queue.keys.skipped(uid))
        log.info("job %s: requeued %d dead letters (annotation %r)", job.name, requeued, retry_value)
        retry_handled = retry_value
        stats = await queue.job_stats(uid)
    if stats.suspended != want_suspended:
        stats = await queue.job_stats(uid)
    return stats, retry_handled


@dataclass(frozen=True)
class _Notes:
    """What the workers and sinks noted for the job beside its counters."""

    skipped: int
    skipped_sample: list[Skipped]
    throttled: list[Throttled]
    problem: Problem | None
    results: dict[str, Any]
    truncated: int = 0
    blocked: tuple[int, list[tuple[str, int]]] = (0, [])  # blocked responses, the most blocked domains
    archive: dict[str, int] | None = None


async def _read_notes(job: _Pass, stats: JobStats) -> _Notes:
    """Skipped URLs, open circuit breakers and a failing sink (the last two only while the job runs), and
    where its results are with their count."""
    queue, uid = job.queue, job.uid
    archived = job.spec.archive is not None or job.spec.archive_source is not None
    read = await JobNotes(queue.redis, queue.keys.job).read(
        uid, running=not stats.finished, blocked=job.spec.session is not None, archive=archived
    )
    skipped, skipped_sample, throttled = read.skipped, read.skipped_sample, read.throttled
    trouble, truncated, blocked, archive = read.sink_trouble, read.truncated, read.blocked, read.archive
    problem = Problem("SinkFailing", f"the job's sink is failing: {trouble.message}") if trouble is not None else None
    written, retained = await results_written(queue, job.spec, uid, job.prev)
    count = written if written is not None else stats.succeeded - min(skipped, stats.succeeded)
    results = results_location(queue, job.spec, uid, job.name, count, retained)
    return _Notes(skipped, skipped_sample, throttled, problem, results, truncated, blocked, archive)


async def _after_the_job(job: _Pass, new_status: dict[str, Any]) -> list[Transition]:
    """Once the job is terminal: its data's retention, the sink's finish (an S3 manifest), onComplete (with
    an Event for each hook that has just failed)."""
    queue, uid, spec, prev = job.queue, job.uid, job.spec, job.prev
    terminal = new_status["phase"] in TERMINAL
    if terminal and prev.get("phase") not in TERMINAL:
        retention = job.pool.queue.finished_job_retention_seconds
        if spec.ttl_seconds_after_finished is not None:
            retention = max(retention, spec.ttl_seconds_after_finished + 60)
        await queue.expire_job(uid, retention)
        await queue.redis.expire(queue.keys.results_digests(uid), retention)
        await queue.redis.expire(queue.keys.results_written(uid), retention)
        await queue.redis.expire(queue.keys.results_pending(uid), retention)
        await queue.redis.expire(queue.keys.skipped(uid), retention)
        await queue.redis.expire(queue.keys.throttled(uid), retention)
    if terminal and new_status.get("results"):
        done = (prev.get("results") or {}).get("manifest")
        new_status["results"].update(
            {"manifest": done}
            if done
            else await finish_sink(
                job.namespace,
                job.name,
                uid,
                spec,
                new_status,
                job.read_secret,
                allowed=parse_networks(job.pool.worker.allowed_cidrs),
                secret_namespace=job.pool_namespace,
            )
        )
    if terminal and spec.on_complete is not None:
        new_status["onComplete"] = await run_hooks(
            namespace=job.namespace,
            name=job.name,
            uid=uid,
            spec=spec.on_complete,
            pool=job.pool,
            pool_name=spec.pool,
            status=new_status,
            prev=prev.get("onComplete"),
            allowed=parse_networks(job.pool.worker.allowed_cidrs),
            now=job.now,
            read_secret=job.read_secret,
            secret_namespace=job.pool_namespace,
        )
        return hook_events(prev.get("onComplete"), new_status["onComplete"])
    if "onComplete" in prev:
        new_status["onComplete"] = prev["onComplete"]
    return []


def _ttl_expired(spec: ScrapeJobSpec, status: Mapping[str, Any], now: datetime) -> bool:
    """ttlSecondsAfterFinished has passed since the job finished: delete the object."""
    if status["phase"] not in TERMINAL or spec.ttl_seconds_after_finished is None:
        return False
    done_at = parse_time(status.get("completionTime"))
    return done_at is not None and (now - done_at).total_seconds() >= spec.ttl_seconds_after_finished


async def _requeue_dead(queue: Queue, uid: str, dead: int, *, include_permanent: bool) -> int:
    """Send dead letters back to the queue: by default only those another attempt may fix (a page that
    robots.txt forbids or that answered 404 would fail the same way); all of them when asked."""
    if include_permanent:
        return await queue.requeue_dead(uid)
    records = await queue.dead_letters(uid, limit=max(1, dead))
    retryable = [r.task_id for r in records if r.error_class not in PERMANENT_CLASSES]
    if not retryable:
        return 0
    return await queue.requeue_dead(uid, retryable)


def _deadline_exceeded(spec: ScrapeJobSpec, prev: Mapping[str, Any], stats: JobStats, now: datetime) -> bool:
    failed = get_condition(prev.get("conditions"), ConditionType.FAILED)
    if failed and failed.get("status") == "True" and failed.get("reason") == "DeadlineExceeded":
        return True
    if spec.active_deadline_seconds is None or stats.finished:
        return False
    started = parse_time(prev.get("startTime"))
    if started is None and stats.first_claim_at is not None:
        started = datetime.fromtimestamp(stats.first_claim_at, now.tzinfo)
    return started is not None and (now - started).total_seconds() > spec.active_deadline_seconds


async def cancel_job(
    *,
    namespace: str,
    uid: str,
    spec_raw: Mapping[str, Any],
    pool_index: Mapping[Any, Any],
    connections: RedisConnections,
    secrets: Mapping[Any, Any] | None = None,
) -> str:
    """Remove the job's tasks and keys from Redis (deletion = cancellation). Returns what happened."""
    pool_name = spec_raw.get("pool")
    if not isinstance(pool_name, str):
        return "no pool: nothing to cancel"
    pool_ns = spec_raw.get("poolNamespace") or namespace
    if not isinstance(pool_ns, str):
        return "no pool: nothing to cancel"
    pool = pool_from_index(pool_index, pool_ns, pool_name)
    if isinstance(pool, Problem):
        return f"{pool.message}: nothing to cancel"
    redis = await connections.for_pool(pool_ns, pool_name, pool.spec, secrets or {})
    queue = pool_queue(redis, pool_ns, pool_name, pool.spec)
    await queue.cancel(uid)
    # The sinks' record of written (job, URL) keys lives beside the results stream.
    await redis.delete(
        queue.keys.results_digests(uid),
        queue.keys.results_written(uid),
        queue.keys.results_pending(uid),
        queue.keys.skipped(uid),
        queue.keys.throttled(uid),
    )
    return "cancelled"


async def delete_job_object(namespace: str, name: str) -> None:
    await kube.delete_if_present(
        kube.custom().delete_namespaced_custom_object, GROUP, VERSION, namespace, "scrapejobs", name
    )
