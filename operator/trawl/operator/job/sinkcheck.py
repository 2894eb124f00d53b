"""A job's sink as the operator sees it: checked before the job is accepted, closed when it finishes.

Checked on every pass until the job is registered in the queue (then workers write, and a later failure
is theirs to report through the sink-failure budget), so a sink that cannot work shows as Stalled
before anything is fetched: a PostgreSQL table is created when missing and checked when present, an
S3 bucket must exist and accept the credentials. When an S3 job finishes, the operator writes the
manifest listing the job's objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import urllib3
from minio.error import MinioException

from trawl.api.common import SecretKeyRef
from trawl.api.scrapejob import ScrapeJobSpec, SinkKind
from trawl.operator.problems import Problem
from trawl.operator.secrets import SecretNotFound, no_secrets
from trawl.sinks import postgres as pgsink
from trawl.sinks import s3 as s3sink
from trawl.sinks.base import SinkError

CHECK_TIMEOUT = 30.0

SecretReader = Callable[[str, SecretKeyRef], Awaitable[str]]


class _Unreadable(Exception):
    pass


async def _read(read_secret: SecretReader, namespace: str, ref: SecretKeyRef, field: str) -> str:
    try:
        return (await read_secret(namespace, ref)).strip()
    except SecretNotFound as exc:  # the helper's message is about the Secret, not Redis
        raise _Unreadable(f"output.{field}: {exc}") from None


async def s3_target(namespace: str, spec: ScrapeJobSpec, read_secret: SecretReader) -> s3sink.S3Target:
    assert spec.output is not None and spec.output.s3 is not None
    s3 = spec.output.s3
    access = await _read(read_secret, namespace, s3.access_key_id_secret_ref, "s3.accessKeyIdSecretRef")
    secret = await _read(read_secret, namespace, s3.secret_access_key_secret_ref, "s3.secretAccessKeySecretRef")
    return s3sink.target_from_spec(s3, access, secret)


async def sink_problem(namespace: str, spec: ScrapeJobSpec, read_secret: SecretReader = no_secrets) -> Problem | None:
    """None when the job's sink is ready for its records, else the Stalled reason and message."""
    output = spec.output
    try:
        if output is not None and output.sink == SinkKind.POSTGRESQL and output.postgres is not None:
            return await _postgres_problem(namespace, spec, read_secret)
        if output is not None and output.sink == SinkKind.S3 and output.s3 is not None:
            target = await s3_target(namespace, spec, read_secret)
            try:
                async with asyncio.timeout(CHECK_TIMEOUT):
                    await asyncio.to_thread(s3sink.check_bucket, target)
            except (SinkError, MinioException, urllib3.exceptions.HTTPError, OSError, TimeoutError) as exc:
                message = " ".join(str(exc).split()) or type(exc).__name__
                return Problem("SinkUnavailable", f"S3 {target.describe()}: {message}")
    except _Unreadable as exc:
        return Problem("SinkSecretUnreadable", str(exc))
    return None


async def _postgres_problem(namespace: str, spec: ScrapeJobSpec, read_secret: SecretReader) -> Problem | None:
    assert spec.output is not None and spec.output.postgres is not None
    pg = spec.output.postgres
    password = None
    if pg.password_secret_ref is not None:
        password = await _read(read_secret, namespace, pg.password_secret_ref, "postgres.passwordSecretRef")
    target = pgsink.target_from_spec(pg, password)
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            await pgsink.ensure_table(target)
    except pgsink.SchemaMismatch as exc:
        return Problem("SinkSchemaMismatch", f"PostgreSQL {target.describe()}: {exc}")
    except (psycopg.Error, OSError, TimeoutError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        return Problem("SinkUnavailable", f"PostgreSQL {target.describe()}: {message}")
    return None


async def finish_sink(
    namespace: str,
    name: str,
    uid: str,
    spec: ScrapeJobSpec,
    status: dict[str, Any],
    read_secret: SecretReader = no_secrets,
) -> dict[str, Any]:
    """Fields for ``status.results`` once the job is finished: the S3 manifest written, or why not."""
    output = spec.output
    if output is None or output.sink != SinkKind.S3 or output.s3 is None:
        return {}
    try:
        target = await s3_target(namespace, spec, read_secret)
        info = {
            "name": name,
            "namespace": namespace,
            "phase": status.get("phase"),
            "completionTime": status.get("completionTime"),
            "counts": status.get("counts"),
        }
        async with asyncio.timeout(CHECK_TIMEOUT * 2):
            await asyncio.to_thread(s3sink.write_manifest, target, uid, info)
    except (_Unreadable, MinioException, urllib3.exceptions.HTTPError, OSError, TimeoutError, ValueError) as exc:
        return {"manifestError": (" ".join(str(exc).split()) or type(exc).__name__)[:1024]}
    return {"manifest": f"s3://{target.bucket}/{target.job_prefix(uid)}{s3sink.MANIFEST}", "manifestError": None}
