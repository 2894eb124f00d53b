"""ScrapeJob reconciliation: one idempotent pass from spec and queue counters to status.

Called by kopf on create, update, resume and a timer. Every pass re-derives everything from the
spec, the pool and Redis, so a restarted operator simply continues: enqueueing resumes at the
queue's own cursor, nothing is remembered in memory that the next pass would need.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from redis.exceptions import OutOfMemoryError, RedisError

from trawl.api.common import parse_time, validation_message
from trawl.api.naming import ANNOTATION_RETRY_DEAD, GROUP, RETRY_ALL_SUFFIX, VERSION
from trawl.api.policies import PERMANENT_CLASSES
from trawl.api.scrapejob import ScrapeJobSpec, SinkKind
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.egress.addresses import parse_networks
from trawl.jobspec.admission import browser_missing, spec_problem, unmounted_directory, unmounted_secrets
from trawl.operator import kube
from trawl.operator.conditions import get_condition
from trawl.operator.connections import RedisConnections, pool_queue
from trawl.operator.secrets import secret_reader
from trawl.queue import Queue, QueueUnavailable
from trawl.queue.model import DeadLetterRecord, JobConfig, JobStats
from trawl.queue.notes import JobNotes
from trawl.redisconn.memory import out_of_memory
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from .oncomplete import run_hooks
from .sinkcheck import SecretReader, finish_sink, sink_problem
from .status import TERMINAL, JobFacts, Problem, Transition, derive_job_status

log = logging.getLogger(__name__)


class SinkNotReady(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclass
class PoolRef:
    spec: ScrapePoolSpec
    uid: str


@dataclass
class JobOutcome:
    status: dict[str, Any]
    events: list[Transition] = field(default_factory=list)
    delete_object: bool = False


def failed_job(generation: int, status: Mapping[str, Any], now: datetime, reason: str, msg: str) -> JobOutcome:
    """The status of a pass that failed unexpectedly: Stalled with the error (the queue is untouched)."""
    facts = JobFacts(generation=generation, suspend=False, problem=Problem(reason, msg))
    return JobOutcome(*derive_job_status(facts, dict(status), now))


def pool_from_index(pool_index: Mapping[Any, Any], namespace: str, name: str) -> PoolRef | Problem:
    entries = list(pool_index.get((namespace, name), []))
    if not entries:
        return Problem("PoolNotFound", f"ScrapePool {namespace}/{name} does not exist")
    raw = entries[0]
    try:
        return PoolRef(ScrapePoolSpec.model_validate(raw["spec"]), raw["uid"])
    except ValidationError as exc:
        return Problem("PoolInvalid", f"ScrapePool {name} is invalid: {validation_message(exc)}")


def job_config(uid: str, spec: ScrapeJobSpec, pool: ScrapePoolSpec) -> JobConfig:
    from trawl.jobspec.wire import build_job_config

    config: JobConfig = build_job_config(uid, spec, pool)
    return config


def results_location(
    queue: Queue, spec: ScrapeJobSpec, uid: str, name: str, count: int, retained: int | None = None
) -> dict[str, Any]:
    output = spec.output
    sink = output.sink if output else SinkKind.REDIS_STREAM
    if sink == SinkKind.JSON_LINES and output and output.json_lines:
        location = f"{output.json_lines.directory.rstrip('/')}/{uid}.jsonl"  # the file JsonLinesSink.path writes
    elif sink == SinkKind.WEBHOOK and output and output.webhook:
        location = output.webhook.url
    elif sink == SinkKind.S3 and output and output.s3:
        s3 = output.s3
        location = f"s3://{s3.bucket}/{s3.prefix}{uid}/" + (f" at {s3.endpoint}" if s3.endpoint else "")
    elif sink == SinkKind.POSTGRESQL and output and output.postgres:
        pg = output.postgres
        location = f"postgresql://{pg.user}@{pg.host}:{pg.port}/{pg.database} table {pg.table} (job = '{uid}')"
    else:
        location = f"redis: {queue.keys.results(uid)}"
    out: dict[str, Any] = {"sink": sink.value, "location": location, "count": count}
    if retained is not None:
        out["retained"] = retained
    return out


async def results_written(
    queue: Queue, spec: ScrapeJobSpec, uid: str, prev: Mapping[str, Any]
) -> tuple[int | None, int | None]:
    """Records written for the job and, for the Redis stream sink, how many the stream still holds (it
    trims at maxLen). The Redis, JsonLines and Webhook sinks record each written (job, URL) key in one set
    beside the stream; the PostgreSQL sink's table is its own record (None: not known here). Never below
    what the status said already: a set that expired does not rewind the count."""
    sink = spec.output.sink if spec.output is not None else SinkKind.REDIS_STREAM
    if sink == SinkKind.POSTGRESQL:
        return None, None
    key = queue.keys.results(uid)
    stream = sink == SinkKind.REDIS_STREAM
    async with queue.redis.pipeline(transaction=False) as pipe:
        pipe.scard(queue.keys.results_written(uid))
        if stream:
            pipe.xlen(key)
        found = await pipe.execute()
    before = int(((prev.get("results") or {}).get("count")) or 0)
    return max(int(found[0]), before), int(found[1]) if stream else None


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


async def _enqueue_seeds(queue: Queue, uid: str, spec: ScrapeJobSpec) -> int:
    seeds = spec.seed_urls()
    if spec.crawl is not None:
        seeds = seeds[: spec.crawl.max_pages]
    # One call from index 0 (the queue batches it): idempotent per seed index, and a sharded queue places
    # the whole list so that each shard's part is the same at every pass.
    await queue.enqueue(uid, seeds, start_index=0)
    await queue.mark_enqueue_done(uid)
    return len(seeds)


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
) -> JobOutcome:
    """One pass over a job. ``secrets``: the operator's Secret index (None: no Secrets exist)."""
    prev = dict(status)
    try:
        spec = ScrapeJobSpec.model_validate(dict(spec_raw))
    except ValidationError as exc:
        facts = JobFacts(generation=generation, suspend=False, problem=Problem("InvalidSpec", validation_message(exc)))
        return JobOutcome(*derive_job_status(facts, prev, now))

    def stalled(problem: Problem) -> JobOutcome:
        facts = JobFacts(generation=generation, suspend=spec.suspend, problem=problem)
        return JobOutcome(*derive_job_status(facts, prev, now))

    pool = pool_from_index(pool_index, namespace, spec.pool)
    if isinstance(pool, Problem):
        return stalled(pool)
    unmounted = unmounted_secrets(spec, pool.spec)
    if unmounted:
        return stalled(
            Problem(
                "SecretNotMounted",
                f"the job's output names Secret {unmounted[0]!r}, which ScrapePool {spec.pool!r} does not "
                f"mount into its workers: add it to the pool's spec.worker.secrets",
            )
        )
    unmounted_dir = unmounted_directory(spec, pool.spec)
    if unmounted_dir is not None:
        return stalled(Problem("DirectoryNotMounted", unmounted_dir))
    no_browser = browser_missing(spec, pool.spec)
    if no_browser is not None:
        return stalled(Problem("BrowserNotAvailable", no_browser))
    try:
        config = job_config(uid, spec, pool.spec)
    except ValueError as exc:
        return stalled(Problem("InvalidSpec", f"spec combined with pool defaults is invalid: {exc}"))
    unusable = spec_problem(config.spec)
    if unusable is not None:
        return stalled(Problem("InvalidSpec", unusable))
    try:
        redis = await connections.for_pool(namespace, spec.pool, pool.spec, secrets or {})
    except (RedisConfigError, RedisUnreachable) as exc:
        return stalled(Problem("RedisUnavailable", str(exc)))

    queue = pool_queue(redis, namespace, spec.pool, pool.spec)
    try:
        return await _reconcile_with_queue(
            queue,
            config,
            spec,
            pool.spec,
            namespace,
            name,
            uid,
            generation,
            prev,
            annotations,
            now,
            secret_reader(secrets or {}),
        )
    except SinkNotReady as exc:
        return stalled(exc.problem)
    except OutOfMemoryError:  # Redis answers, but is full: every pass writes (the epoch), so each one says so
        return stalled(Problem(*await out_of_memory(redis)))
    except (QueueUnavailable, RedisError, OSError) as exc:
        connections.failed(namespace, spec.pool)
        return stalled(Problem("RedisUnavailable", f"Redis error: {type(exc).__name__}: {exc}"))


async def _reconcile_with_queue(
    queue: Queue,
    config: JobConfig,
    spec: ScrapeJobSpec,
    pool: ScrapePoolSpec,
    namespace: str,
    name: str,
    uid: str,
    generation: int,
    prev: dict[str, Any],
    annotations: Mapping[str, str],
    now: datetime,
    read_secret: SecretReader,
) -> JobOutcome:
    prev_phase = prev.get("phase")
    epoch = await queue.epoch()
    stats: JobStats = await queue.job_stats(uid)
    enqueued = prev.get("enqueued")
    data_lost = None
    if not stats.exists and prev.get("queueEpoch") not in (None, epoch):
        data_lost = data_lost_message(prev, running=prev_phase not in TERMINAL)
    if not stats.exists and prev_phase in TERMINAL:
        # Retention removed the queue data of a finished job (or Redis lost it: then say so): the status
        # is the record now, never rewritten to claim less or more than it knew.
        facts = JobFacts(generation=generation, suspend=spec.suspend, stats=None, epoch=epoch, data_lost=data_lost)
        kept, events = derive_job_status(facts, prev, now)
        for key in ("onComplete", "results"):  # the record of what happened after the job
            if key in prev and key not in kept:
                kept[key] = prev[key]
        return JobOutcome(kept, events)
    if not stats.exists:
        # Accepting the job: its sink must be able to take the records before anything is fetched.
        problem = await sink_problem(namespace, spec, read_secret)
        if problem is not None:
            raise SinkNotReady(problem)
    if not stats.exists or not stats.enqueue_done:
        await queue.register_job(config)
        if spec.suspend and not stats.suspended:
            # Before the first seed: a job created suspended must never enter the claim ring.
            await queue.suspend(uid)
        enqueued = await _enqueue_seeds(queue, uid, spec)
        stats = await queue.job_stats(uid)

    deadline_exceeded = _deadline_exceeded(spec, prev, stats, now)
    want_suspended = spec.suspend or deadline_exceeded
    if want_suspended and not stats.suspended:
        await queue.suspend(uid)
    elif not want_suspended and stats.suspended:
        await queue.resume(uid)

    retry_handled = prev.get("retryDeadLettersHandled")
    retry_value = annotations.get(ANNOTATION_RETRY_DEAD)
    if retry_value is not None and retry_value != retry_handled:
        requeued = await _requeue_dead(queue, uid, stats.dead, include_permanent=retry_value.endswith(RETRY_ALL_SUFFIX))
        if requeued:
            # The job runs again: results it already wrote keep their dedupe set past the retention
            # its first finish set (the queue's own keys lose their TTL in requeue_dead).
            await queue.redis.persist(queue.keys.results_written(uid))
            await queue.redis.persist(queue.keys.skipped(uid))
        log.info("job %s: requeued %d dead letters (annotation %r)", name, requeued, retry_value)
        retry_handled = retry_value
        stats = await queue.job_stats(uid)
    if stats.suspended != want_suspended:
        stats = await queue.job_stats(uid)

    notes = JobNotes(queue.redis, queue.keys.job)
    skipped, skipped_sample = await notes.skipped(uid)
    problem = None
    throttled = []
    if not stats.finished:
        throttled = await notes.throttled_domains(uid)
        trouble = await notes.sink_trouble(uid)
        if trouble is not None:
            problem = Problem("SinkFailing", f"the job's sink is failing: {trouble.message}")

    written, retained = await results_written(queue, spec, uid, prev)
    dead_letters: list[DeadLetterRecord] = []
    prev_dead = int((prev.get("counts") or {}).get("deadLettered", -1))
    if stats.dead and stats.dead != prev_dead:
        dead_letters = list(reversed(await queue.dead_letters(uid, limit=20)))
    facts = JobFacts(
        generation=generation,
        suspend=spec.suspend,
        stats=stats,
        deadline_exceeded=deadline_exceeded,
        max_dead_letters=spec.max_dead_letters,
        enqueued=enqueued,
        dead_letters=dead_letters,
        results=results_location(
            queue,
            spec,
            uid,
            name,
            written if written is not None else stats.succeeded - min(skipped, stats.succeeded),
            retained,
        ),
        epoch=epoch,
        data_lost=data_lost,
        retry_handled=retry_handled,
        problem=problem,
        skipped=skipped,
        skipped_sample=skipped_sample,
        throttled=throttled,
    )
    new_status, events = derive_job_status(facts, prev, now)
    if not dead_letters and stats.dead and "deadLetters" in prev:
        new_status["deadLetters"] = prev["deadLetters"]
    if new_status["phase"] in TERMINAL and prev_phase not in TERMINAL:
        retention = pool.queue.finished_job_retention_seconds
        if spec.ttl_seconds_after_finished is not None:
            retention = max(retention, spec.ttl_seconds_after_finished + 60)
        await queue.expire_job(uid, retention)
        await queue.redis.expire(queue.keys.results_written(uid), retention)
        await queue.redis.expire(queue.keys.results_pending(uid), retention)
        await queue.redis.expire(queue.keys.skipped(uid), retention)
        await queue.redis.expire(queue.keys.throttled(uid), retention)
    if new_status["phase"] in TERMINAL and new_status.get("results"):
        done = (prev.get("results") or {}).get("manifest")
        new_status["results"].update(
            {"manifest": done} if done else await finish_sink(namespace, name, uid, spec, new_status, read_secret)
        )
    if new_status["phase"] in TERMINAL and spec.on_complete is not None:
        new_status["onComplete"] = await run_hooks(
            namespace=namespace,
            name=name,
            uid=uid,
            spec=spec.on_complete,
            status=new_status,
            prev=prev.get("onComplete"),
            allowed=parse_networks(pool.worker.allowed_cidrs or []),
            now=now,
            read_secret=read_secret,
        )
    elif "onComplete" in prev:
        new_status["onComplete"] = prev["onComplete"]
    delete = False
    if new_status["phase"] in TERMINAL and spec.ttl_seconds_after_finished is not None:
        done_at = parse_time(new_status.get("completionTime"))
        delete = done_at is not None and (now - done_at).total_seconds() >= spec.ttl_seconds_after_finished
    return JobOutcome(new_status, events, delete)


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
    failed = get_condition(prev.get("conditions"), "Failed")
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
    pool = pool_from_index(pool_index, namespace, pool_name)
    if isinstance(pool, Problem):
        return f"{pool.message}: nothing to cancel"
    redis = await connections.for_pool(namespace, pool_name, pool.spec, secrets or {})
    queue = pool_queue(redis, namespace, pool_name, pool.spec)
    await queue.cancel(uid)
    # The sinks' record of written (job, URL) keys lives beside the results stream.
    await redis.delete(queue.keys.results_written(uid), queue.keys.skipped(uid), queue.keys.throttled(uid))
    return "cancelled"


async def delete_job_object(namespace: str, name: str) -> None:
    await kube.delete_if_present(
        kube.custom().delete_namespaced_custom_object, GROUP, VERSION, namespace, "scrapejobs", name
    )
