"""S3-compatible object storage sink: one object per written batch (gzip JSON Lines, CSV or Parquet:
``output.s3.format``), under a job prefix.

Layout in the bucket::

    <prefix><job UID>/records/<ns timestamp>-<sha256>-<n>.<jsonl.gz|csv|parquet>   n records (rows)
    <prefix><job UID>/manifest.json          written by the operator at the end: objects, rows, checksums

A CSV or Parquet batch over the file bounds is split into several objects (:mod:`.tabular`).
Exactly once per (job, URL), although an object holds many records and a worker can die between its
PUT and its bookkeeping: the pending-object protocol of :mod:`.parts` (a PUT is atomic in S3).

The client (the ``minio`` SDK, blocking) runs on a bounded thread pool of its own (:func:`run`), never
the event loop's default executor; its HTTP pool has short timeouts and few retries, because a failed
write goes back to the Finisher, which keeps the record and retries it. Its connections go only where
the pool's address rule allows and follow no redirect (:func:`trawl.egress.sinkaddr.checked_pool_manager`).

The job's author chooses the endpoint, so what the store answers is the author's to write: an error is
summarised as its S3 error code and HTTP status (:func:`describe_error`), never the answer's body, and
the status a job shows cannot carry what some other service said.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gzip
import io
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import urllib3
from minio import Minio
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError
from redis.asyncio import Redis

from trawl.api.plain import FileFormat
from trawl.api.scrapejob import S3Sink as S3Spec
from trawl.egress.addresses import IPNetwork
from trawl.egress.resolver import find_blocked
from trawl.egress.sinkaddr import checked_pool_manager

from .base import Record, SinkError
from .parts import PartWriter, encoder
from .tabular import CONTENT_TYPE as CONTENT_TYPES
from .tabular import SUFFIX, Column, Part, parse_name, part_name

MANIFEST = "manifest.json"
THREADS = 8

T = TypeVar("T")

_pool: concurrent.futures.ThreadPoolExecutor | None = None


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the S3 client's own bounded threads: a store that answers slowly holds
    at most :data:`THREADS` of them, never the threads everything else resolves names on. Every request
    is bounded by the client's timeouts, so a thread a cancelled caller leaves behind ends with them."""
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="trawl-s3")
    return await asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args, **kwargs))


_TOKEN = re.compile(r"[A-Za-z0-9.]{1,64}")


def describe_error(exc: BaseException) -> str:
    """What an S3 failure says on a job's status: the address refusal, or the S3 error code and HTTP
    status, or the kind of connection failure; never the body of what the endpoint answered."""
    blocked = find_blocked(exc)
    if blocked is not None:
        return str(blocked)
    if isinstance(exc, S3Error):
        code = exc.code if exc.code and _TOKEN.fullmatch(exc.code) else "an unknown error"
        return f"S3 {code} (HTTP {exc.response.status})"
    if isinstance(exc, InvalidResponseError):
        return f"not an S3 answer (HTTP {getattr(exc, '_code', '?')})"
    if isinstance(exc, ServerError):
        return f"S3 server error (HTTP {exc.status_code})"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return describe_error(exc.reason)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError | ValueError):
        return _one_line(exc)  # a connection's failure (refused, timed out, TLS) or a bad setting: our words
    return type(exc).__name__


@dataclass(frozen=True, slots=True)
class S3Target:
    bucket: str
    prefix: str
    endpoint: str | None  # URL; None: AWS
    region: str
    path_style: bool
    access_key: str
    secret_key: str
    allowed: tuple[IPNetwork, ...] = ()  # the pool's worker.allowedCidrs: the only non-global addresses allowed

    def job_prefix(self, job_id: str) -> str:
        return f"{self.prefix}{job_id}/"

    def describe(self, job_id: str | None = None) -> str:
        where = self.endpoint or f"AWS {self.region}"
        return f"s3://{self.bucket}/{self.job_prefix(job_id) if job_id else self.prefix} at {where}"


def target_from_spec(spec: S3Spec, access_key: str, secret_key: str, *, allowed: Sequence[IPNetwork] = ()) -> S3Target:
    """The target a job's spec names, with its pool's address rule."""
    return S3Target(
        bucket=spec.bucket,
        prefix=spec.prefix,
        endpoint=spec.endpoint,
        region=spec.region,
        path_style=spec.path_style,
        access_key=access_key,
        secret_key=secret_key,
        allowed=tuple(allowed),
    )


def client(target: S3Target, *, timeout: float = 30.0, retries: int = 2) -> Minio:
    if target.endpoint:
        url = urlsplit(target.endpoint)
        host, secure = url.netloc, url.scheme == "https"
    else:
        host, secure = "s3.amazonaws.com", True
    http = checked_pool_manager(  # only where the pool's rule allows, whatever the name says; no redirect
        target.allowed,
        timeout=urllib3.Timeout(connect=min(10.0, timeout), read=timeout),
        retries=urllib3.Retry(total=retries, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
        maxsize=8,
    )
    mc = Minio(
        host,
        access_key=target.access_key,
        secret_key=target.secret_key,
        secure=secure,
        region=target.region,
        http_client=http,
    )
    if target.path_style:
        mc.disable_virtual_style_endpoint()  # type: ignore[no-untyped-call]
    else:
        mc.enable_virtual_style_endpoint()  # type: ignore[no-untyped-call]
    return mc


def object_name(target: S3Target, job_id: str, part: Part, fmt: FileFormat = FileFormat.JSON_LINES) -> str:
    return f"{target.job_prefix(job_id)}records/{part_name(time.time_ns(), part, fmt)}"


def records_in(name: str) -> int:
    """The record count an object's name carries (``...-<n>.<suffix>``)."""
    parsed = parse_name(name)
    return parsed[1] if parsed is not None else 0


def _exists(mc: Minio, bucket: str, name: str) -> bool:
    try:
        mc.stat_object(bucket, name)
    except S3Error as exc:
        if exc.code in ("NoSuchKey", "NoSuchObject", "ResourceNotFound"):
            return False
        raise
    return True


# Job acceptance: one request, no retry, its connect and read timeouts and the name's resolution
# (trawl.egress.names) together under the operator's 30 s check, so a check it gave up on leaves no thread.
CHECK_REQUEST_SECONDS = 8.0


def check_bucket(target: S3Target) -> None:
    """Raise when the bucket cannot be reached or does not exist (job acceptance)."""
    mc = client(target, timeout=CHECK_REQUEST_SECONDS, retries=0)
    if not mc.bucket_exists(target.bucket):
        raise SinkError(f"bucket {target.bucket} does not exist")


class S3Sink:
    """``fmt`` and ``schema`` are the job's (one sink per target, format and schema)."""

    def __init__(
        self,
        redis: Redis,
        dedupe_key: Any,
        target: S3Target,
        *,
        fmt: FileFormat = FileFormat.JSON_LINES,
        schema: Sequence[Column] = (),
    ) -> None:
        self.target = target
        self.fmt = fmt
        self._client = client(target)
        self._writer = PartWriter(redis, dedupe_key, self, encoder(fmt, schema))

    def name(self, job_id: str, part: Part) -> str:
        return object_name(self.target, job_id, part, self.fmt)

    async def exists(self, name: str) -> bool:
        return await run(_exists, self._client, self.target.bucket, name)

    async def put(self, name: str, part: Part) -> None:
        await run(
            self._client.put_object,
            self.target.bucket,
            name,
            io.BytesIO(part.body),
            len(part.body),
            content_type=CONTENT_TYPES[self.fmt],
            metadata={"x-amz-meta-records": str(part.rows)},
        )

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        try:
            return await self._writer.write(job_id, records)
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise SinkError(f"s3 write to {self.target.describe(job_id)} failed: {describe_error(exc)}") from exc

    async def close(self) -> None:
        self._client._http.clear()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500] or type(exc).__name__


def list_objects(target: S3Target, job_id: str) -> list[dict[str, Any]]:
    """The job's record objects, in the order written (their names start with a timestamp)."""
    mc = client(target)
    objs = mc.list_objects(target.bucket, prefix=target.job_prefix(job_id) + "records/", recursive=True)
    out = []
    for o in objs:
        parsed = parse_name(str(o.object_name))
        if parsed is not None:
            digest, rows = parsed
            out.append({"key": o.object_name, "records": rows, "size": o.size, "sha256": digest or None})
    return sorted(out, key=lambda o: str(o["key"]))


def write_manifest(target: S3Target, job_id: str, info: dict[str, Any]) -> dict[str, Any]:
    """Write ``<prefix><job>/manifest.json`` listing the job's objects (their rows and sha256, which their
    names carry); ``info`` adds the job's name, counts and, for CSV and Parquet, format and schema."""
    objects = list_objects(target, job_id)
    manifest = {
        **info,
        "job": job_id,
        "bucket": target.bucket,
        "prefix": target.job_prefix(job_id),
        "records": sum(int(o["records"]) for o in objects),
        "objects": objects,
    }
    body = json.dumps(manifest, indent=1, default=str).encode()
    client(target).put_object(
        target.bucket,
        target.job_prefix(job_id) + MANIFEST,
        io.BytesIO(body),
        len(body),
        content_type="application/json",
    )
    return manifest


def read_records(target: S3Target, job_id: str) -> list[dict[str, Any]]:
    """Every record of the job, object by object in the order written (``trawl results``)."""
    mc = client(target)
    out: list[dict[str, Any]] = []
    for obj in list_objects(target, job_id):
        resp = mc.get_object(target.bucket, str(obj["key"]))
        try:
            data = resp.read()
        finally:
            resp.close()
            resp.release_conn()
        out.extend(decode_object(str(obj["key"]), data))
    return out


def decode_object(name: str, data: bytes) -> list[dict[str, Any]]:
    """The records (rows) of one object, whatever its format."""
    if name.endswith(SUFFIX[FileFormat.PARQUET]):
        import pyarrow.parquet as pq

        return list(pq.read_table(io.BytesIO(data)).to_pylist())
    if name.endswith(SUFFIX[FileFormat.CSV]):
        import csv

        return list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    return [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line]
