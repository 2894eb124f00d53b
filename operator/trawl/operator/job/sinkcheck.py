"""A job's sink as the operator sees it: checked before the job is accepted, closed when it finishes.

Checked on every pass until the job is registered in the queue (then workers write, and a later failure
is theirs to report through the sink-failure budget), so a sink that cannot work shows as Stalled
before anything is fetched: a PostgreSQL table is created when missing and checked when present, an
S3 bucket must exist and accept the credentials. When an S3 job finishes, the operator writes the
manifest listing the job's objects.

The operator connects where the job's author says, with the pool's credentials, so it follows the
pool's rules as its workers do: the address rule with the pool's ``worker.allowedCidrs`` (a refused
address is never connected to) and its cleartext-password choice. Every check is bounded and leaves
nothing running once given up on: PostgreSQL is asyncio all the way (cancelled at the timeout), S3
runs on the client's own bounded threads with request timeouts below :data:`CHECK_TIMEOUT`, and names
resolve on egress's bounded pool. What a status says of a failure is the summary, never a remote body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg
import urllib3
from minio.error import MinioException

from trawl.api.common import SecretKeyRef
from trawl.api.scrapejob import ScrapeJobSpec, SinkKind
from trawl.api.tabular import FileFormat
from trawl.egress.addresses import IPNetwork
from trawl.operator.problems import Problem
from trawl.operator.secrets import SecretNotFound, no_secrets, unreadable
from trawl.sinks import postgres as pgsink
from trawl.sinks import s3 as s3sink
from trawl.sinks.base import SinkError
from trawl.sinks.tabular import describe, schema_of_spec

CHECK_TIMEOUT = 30.0

SecretReader = Callable[[str, SecretKeyRef], Awaitable[str]]


class _Unreadable(Exception):
    pass


async def _read(read_secret: SecretReader, namespace: str, ref: SecretKeyRef, field: str) -> str:
    try:
        return (await read_secret(namespace, ref)).strip()
    except SecretNotFound:  # which Secrets or keys exist is not the job's author's to learn
        raise _Unreadable(f"output.{field}: {unreadable(ref)}") from None


async def s3_target(
    namespace: str, spec: ScrapeJobSpec, read_secret: SecretReader, allowed: Sequence[IPNetwork] = ()
) -> s3sink.S3Target:
    assert spec.output is not None and spec.output.s3 is not None
    s3 = spec.output.s3
    access = await _read(read_secret, namespace, s3.access_key_id_secret_ref, "s3.accessKeyIdSecretRef")
    secret = await _read(read_secret, namespace, s3.secret_access_key_secret_ref, "s3.secretAccessKeySecretRef")
    return s3sink.target_from_spec(s3, access, secret, allowed=allowed)


async def sink_problem(
    namespace: str,
    spec: ScrapeJobSpec,
    read_secret: SecretReader = no_secrets,
    *,
    allowed: Sequence[IPNetwork] = (),
    cleartext_password: bool = False,
) -> Problem | None:
    """None when the job's sink is ready for its records, else the Stalled reason and message.
    ``namespace``: where the Secrets it names are, its pool's (the workers, which write, run there).
    ``allowed`` and ``cleartext_password``: the pool's ``worker.allowedCidrs`` and
    ``worker.allowCleartextPostgresPassword``."""
    output = spec.output
    try:
        if output is not None and output.sink == SinkKind.POSTGRESQL and output.postgres is not None:
            return await _postgres_problem(namespace, spec, read_secret, allowed, cleartext_password)
        if output is not None and output.sink == SinkKind.S3 and output.s3 is not None:
            target = await s3_target(namespace, spec, read_secret, allowed)
            try:
                # check_bucket's own timeouts end it first (trawl.sinks.s3.CHECK_REQUEST_SECONDS)
                async with asyncio.timeout(CHECK_TIMEOUT):
                    await s3sink.run(s3sink.check_bucket, target)
            except (SinkError, MinioException, urllib3.exceptions.HTTPError, OSError, TimeoutError) as exc:
                message = str(exc) if isinstance(exc, SinkError) else s3sink.describe_error(exc)
                return Problem("SinkUnavailable", f"S3 {target.describe()}: {message}")
    except _Unreadable as exc:
        return Problem("SinkSecretUnreadable", str(exc))
    return None


async def _postgres_problem(
    namespace: str, spec: ScrapeJobSpec, read_secret: SecretReader, allowed: Sequence[IPNetwork], cleartext: bool
) -> Problem | None:
    assert spec.output is not None and spec.output.postgres is not None
    pg = spec.output.postgres
    password = None
    if pg.password_secret_ref is not None:
        password = await _read(read_secret, namespace, pg.password_secret_ref, "postgres.passwordSecretRef")
    target = pgsink.target_from_spec(pg, password, allowed=allowed, cleartext_password=cleartext)
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            await pgsink.ensure_table(target)
    except pgsink.SchemaMismatch as exc:
        return Problem("SinkSchemaMismatch", f"PostgreSQL {target.describe()}: {exc}")
    except (psycopg.Error, OSError, TimeoutError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        return Problem("SinkUnavailable", f"PostgreSQL {target.describe()}: {message}"[:2048])
    return None


def tabular_info(spec: ScrapeJobSpec) -> dict[str, Any]:
    """What a CSV or Parquet job's manifest adds: the format and the files' schema (README, Tabular outputs)."""
    output = spec.output
    if output is None or output.s3 is None or output.s3.format == FileFormat.JSON_LINES:
        return {}
    screenshot = spec.render is not None and spec.render.screenshot
    return {"format": output.s3.format.value, "schema": describe(schema_of_spec(spec.extract, screenshot=screenshot))}


async def finish_sink(
    namespace: str,
    name: str,
    uid: str,
    spec: ScrapeJobSpec,
    status: dict[str, Any],
    read_secret: SecretReader = no_secrets,
    *,
    allowed: Sequence[IPNetwork] = (),
    secret_namespace: str | None = None,
) -> dict[str, Any]:
    """Fields for ``status.results`` once the job is finished: the S3 manifest written, or why not.
    ``namespace``: the job's (the manifest names it); ``secret_namespace``: its pool's, whose Secrets the
    credentials are (default ``namespace``)."""
    output = spec.output
    if output is None or output.sink != SinkKind.S3 or output.s3 is None:
        return {}
    try:
        target = await s3_target(secret_namespace or namespace, spec, read_secret, allowed)
        info = {
            "name": name,
            "namespace": namespace,
            "phase": status.get("phase"),
            "completionTime": status.get("completionTime"),
            "counts": status.get("counts"),
        }
        info |= tabular_info(spec)
        async with asyncio.timeout(CHECK_TIMEOUT * 2):
            await s3sink.run(s3sink.write_manifest, target, uid, info)
    except _Unreadable as exc:
        return {"manifestError": str(exc)[:1024]}
    except (MinioException, urllib3.exceptions.HTTPError, OSError, TimeoutError, ValueError) as exc:
        return {"manifestError": s3sink.describe_error(exc)[:1024]}
    return {"manifest": f"s3://{target.bucket}/{target.job_prefix(uid)}{s3sink.MANIFEST}", "manifestError": None}
