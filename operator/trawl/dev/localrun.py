"""``trawl run job.yaml``: a ScrapeJob manifest run on this machine, without a cluster.

For developing extraction rules the way ``scrapy parse`` is used: the manifest is validated by the
same models the operator uses, its tasks go into a real Redis queue (a ``redis-server`` started here
on a loopback port, or ``--redis-url``), in-process workers run them with the same fetcher, politeness,
extraction and sinks as in a cluster, and the results (Redis stream sink) and dead letters are
printed or exported at the end. Nothing is left behind: the Redis started here is removed, and on a
given Redis the job's keys are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from trawl.clitools.exits import EXIT_TIMEOUT, CliError

PREFIX = "trawl:{local/run}"


@dataclass
class RunOutcome:
    job_id: str
    total: int
    succeeded: int
    dead: int
    results: int
    seconds: float


def load_manifest(path: Path) -> Any:
    """The ScrapeJob spec of a manifest file, validated as the operator validates it."""
    from trawl.api.common import validation_message
    from trawl.api.scrapejob import ScrapeJobSpec

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is not valid YAML: {exc}") from None
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "ScrapeJob"]
    if len(jobs) != 1:
        raise CliError(f"{path} must hold exactly one ScrapeJob (found {len(jobs)})")
    try:
        return ScrapeJobSpec.model_validate(jobs[0].get("spec") or {})
    except ValidationError as exc:
        raise CliError(f"invalid ScrapeJob in {path}: {validation_message(exc)}") from None


async def run_job(
    spec: Any,
    redis_url: str,
    *,
    workers: int,
    concurrency: int,
    allowed_cidrs: list[str],
    time_limit: float,
    results_out: TextIO,
    dead_out: TextIO | None,
    progress: Any = None,
) -> RunOutcome:
    """Queue the job, run workers in this process until it finishes, write results and dead letters."""
    from trawl.jobspec.wire import build_job_config
    from trawl.queue import Queue
    from trawl.queue.keys import Keys
    from trawl.redisconn.client import connect
    from trawl.worker.runner import Worker, WorkerConfig

    job_id = uuid.uuid4().hex[:12]
    redis = connect(redis_url)  # the one client factory, as everywhere (plain commands, RESP2 parser)
    keys = Keys(PREFIX)
    queue = Queue(redis, PREFIX, lease_seconds=30)
    started = time.monotonic()
    runners: list[asyncio.Task[None]] = []
    pool: list[Worker] = []
    try:
        await queue.register_job(build_job_config(job_id, spec, None))
        await queue.enqueue(job_id, spec.seed_urls())
        await queue.mark_enqueue_done(job_id)
        for i in range(workers):
            config = WorkerConfig(
                prefix=PREFIX, worker_id=f"local-{i}", concurrency=concurrency, allowed_cidrs=allowed_cidrs
            )
            worker = Worker(config, queue, redis, keys)
            pool.append(worker)
            runners.append(asyncio.create_task(worker.run(), name=f"worker-{i}"))
        deadline = started + time_limit if time_limit else None
        while True:
            stats = await queue.job_stats(job_id)
            if progress is not None:
                progress(stats)
            if stats.finished:
                break
            for runner in runners:
                if runner.done() and runner.exception() is not None:
                    raise CliError(f"a worker stopped: {runner.exception()}")
            if deadline is not None and time.monotonic() > deadline:
                raise CliError(f"timed out after {time_limit:g}s ({stats.pending} tasks pending)", EXIT_TIMEOUT)
            await asyncio.sleep(0.2)
        for worker in pool:
            worker.request_stop()
        await asyncio.gather(*runners, return_exceptions=True)
        runners = []
        count = await _write_results(redis, keys.results(job_id), results_out)
        dead = await queue.dead_letters(job_id, limit=100_000)
        if dead_out is not None:
            for rec in dead:
                line = {"url": rec.url, "attempts": rec.attempts, "errorClass": rec.error_class, "error": rec.message}
                dead_out.write(json.dumps(line, ensure_ascii=False) + "\n")
        return RunOutcome(job_id, stats.total, stats.succeeded, stats.dead, count, time.monotonic() - started)
    finally:
        for worker in pool:
            worker.request_stop()
        if runners:
            await asyncio.gather(*runners, return_exceptions=True)
        try:
            await queue.cancel(job_id)
            await redis.delete(keys.results(job_id))
        finally:
            await redis.aclose()


async def _write_results(redis: Any, stream: str, out: TextIO) -> int:
    """The job's Redis stream, oldest first, one JSON object a line."""
    count = 0
    last = "-"
    while True:
        batch = await redis.xrange(stream, min=last if last == "-" else f"({last}", count=1000)
        if not batch:
            return count
        for entry_id, fields in batch:
            out.write(fields[b"data"].decode() + "\n")
            count += 1
            last = entry_id.decode()
