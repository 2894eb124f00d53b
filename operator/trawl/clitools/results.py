"""``trawl results``: a job's records from its Redis stream, PostgreSQL or S3 sink, as JSON Lines or CSV."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
from collections.abc import AsyncGenerator, Iterable
from dataclasses import replace
from typing import Any, TextIO

import psycopg
import urllib3
from minio.error import MinioException

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.egress.addresses import EVERY_ADDRESS, IPNetwork, parse_networks
from trawl.redisconn.settings import ResolvedRedis
from trawl.sinks import s3 as s3sink
from trawl.sinks.postgres import PgTarget, read_records, target_from_spec

from . import queueaccess
from .exits import EXIT_NOT_FOUND, EXIT_OTHER_SINK, CliError
from .queueaccess import JobRef

FORMATS = ("jsonl", "csv")
# Leading CSV columns, in this order when present; the extracted fields follow, sorted.
CSV_FIRST = ("url", "status", "finalUrl", "depth", "title")
CSV_SKIP = ("key", "job")


READABLE = ("RedisStream", "PostgreSQL", "S3")


def sink_of(job: dict[str, Any]) -> str:
    results = (job.get("status") or {}).get("results") or {}
    return str(results.get("sink") or ((job.get("spec") or {}).get("output") or {}).get("sink") or "RedisStream")


def check_sink(job: dict[str, Any]) -> None:
    """Results of JsonLines and Webhook sinks cannot be read back: say where they are instead."""
    status = job.get("status") or {}
    results = status.get("results") or {}
    sink = sink_of(job)
    if sink in READABLE:
        return
    name = job["metadata"]["name"]
    location = results.get("location") or "(not reported yet)"
    where = {
        "JsonLines": f"written by the workers as JSON Lines to {location} (on the volume mounted into the workers)",
        "Webhook": f"POSTed to the webhook {location}",
        "Files": f"written by the workers as files to {location} (on the volume mounted into the workers; "
        "its manifest.json lists them)",
    }.get(sink, f"in the {sink} sink at {location}")
    raise CliError(f"results of ScrapeJob {name} cannot be read back: they were {where}", EXIT_OTHER_SINK)


def write_jsonl(records: Iterable[dict[str, Any]], out: TextIO) -> int:
    count = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        count += 1
    return count


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def csv_columns(records: list[dict[str, Any]]) -> list[str]:
    seen: set[str] = set()
    for record in records:
        seen.update(record)
    first = [c for c in CSV_FIRST if c in seen]
    rest = sorted(seen - set(first) - set(CSV_SKIP))
    return first + rest


def write_csv(records: list[dict[str, Any]], out: TextIO) -> int:
    columns = csv_columns(records)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow([csv_cell(record.get(c)) for c in columns])
    return len(records)


async def export(cfg: ResolvedRedis, job: dict[str, Any], ref: JobRef, fmt: str, out: TextIO) -> int:
    """Write every record of the job's stream to ``out``; returns how many."""
    if fmt not in FORMATS:
        raise CliError(f"unknown format {fmt!r}: use jsonl or csv")
    expected = int(((job.get("status") or {}).get("results") or {}).get("count") or 0)
    if expected and not await queueaccess.results_exist(cfg, ref):
        conditions = (job.get("status") or {}).get("conditions") or []
        lost = next((c for c in conditions if c.get("type") == "DataLost" and c.get("status") == "True"), None)
        why = f"Redis lost them: {lost.get('message', '')}" if lost else "the pool's retention expired them"
        raise CliError(f"the results of ScrapeJob {ref.name} are no longer in Redis ({why})", EXIT_NOT_FOUND)
    return await write_records(queueaccess.result_records(cfg, ref), fmt, out)


def _pool_worker(pool: dict[str, Any] | None) -> dict[str, Any]:
    return dict(((pool or {}).get("spec") or {}).get("worker") or {})


def _allowed(pool: dict[str, Any] | None, named_by_user: bool) -> tuple[IPNetwork, ...]:
    """The addresses a sink connection may go to: the pool's rule for the host the job's spec names (as its
    workers connect), any for an address the user gave on the command line (a port-forward on loopback)."""
    return EVERY_ADDRESS if named_by_user else parse_networks(_pool_worker(pool).get("allowedCidrs"))


def postgres_target(
    job: dict[str, Any], password: str | None, address: str | None = None, pool: dict[str, Any] | None = None
) -> PgTarget:
    """Where the job's PostgreSQL sink is; ``address`` (host:port) overrides, e.g. for a port-forward.
    ``pool``: the job's ScrapePool, whose address rule and cleartext-password choice apply."""
    spec = ScrapeJobSpec.model_validate(job["spec"])
    assert spec.output is not None and spec.output.postgres is not None
    target = target_from_spec(
        spec.output.postgres,
        password,
        allowed=_allowed(pool, bool(address)),
        cleartext_password=bool(_pool_worker(pool).get("allowCleartextPostgresPassword")),
    )
    if address:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise CliError(f"--postgres-address {address!r} is not host:port")
        target = replace(target, host=host.strip("[]"), port=int(port))
    return target


async def export_postgres(target: PgTarget, job_uid: str, fmt: str, out: TextIO) -> int:
    """Write every record of the job from its PostgreSQL table to ``out``; returns how many."""
    if fmt not in FORMATS:
        raise CliError(f"unknown format {fmt!r}: use jsonl or csv")
    try:
        return await write_records(read_records(target, job_uid), fmt, out)
    except (psycopg.Error, OSError) as exc:
        raise CliError(f"cannot read PostgreSQL {target.describe()}: {' '.join(str(exc).split())}") from None


def s3_target(
    job: dict[str, Any], access: str, secret: str, endpoint: str | None = None, pool: dict[str, Any] | None = None
) -> s3sink.S3Target:
    """Where the job's S3 objects are; ``endpoint`` overrides the spec's (e.g. for a port-forward).
    ``pool``: the job's ScrapePool, whose address rule applies to the spec's endpoint."""
    spec = ScrapeJobSpec.model_validate(job["spec"])
    assert spec.output is not None and spec.output.s3 is not None
    allowed = _allowed(pool, bool(endpoint))
    target = s3sink.target_from_spec(spec.output.s3, access.strip(), secret.strip(), allowed=allowed)
    return replace(target, endpoint=endpoint) if endpoint else target


async def export_s3(target: s3sink.S3Target, job_uid: str, fmt: str, out: TextIO) -> int:
    """Write every record of the job's objects to ``out`` (object by object, in the order written)."""
    if fmt not in FORMATS:
        raise CliError(f"unknown format {fmt!r}: use jsonl or csv")
    try:
        records = await asyncio.to_thread(s3sink.read_records, target, job_uid)
    except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        raise CliError(f"cannot read {target.describe(job_uid)}: {s3sink.describe_error(exc)}") from None

    async def stream() -> AsyncGenerator[dict[str, Any], None]:
        for record in records:
            yield record

    return await write_records(stream(), fmt, out)


async def write_records(stream: AsyncGenerator[dict[str, Any], None], fmt: str, out: TextIO) -> int:
    # Closed here, in this task, whatever happens to ``out``: a reader that goes away mid-stream
    # (`trawl results JOB | head`) must not leave the generator, and its Redis or PostgreSQL
    # connection, to asyncio's shutdown, which would print a traceback while closing it.
    async with contextlib.aclosing(stream):
        if fmt == "jsonl":
            count = 0
            async for record in stream:
                out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
                count += 1
            return count
        records = [record async for record in stream]
    return write_csv(records, out)
