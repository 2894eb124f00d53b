"""Checks a job's sink before the job is accepted, so a sink that cannot work shows as Stalled.

Run on every pass until the job is registered in the queue (then workers write and any later failure
is theirs to report): a PostgreSQL table is created when missing and checked when present; an
unreachable server, refused credentials or a table of another shape stall the job with the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import psycopg

from trawl.api.common import SecretKeyRef
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.worker.pgsink import SchemaMismatch, ensure_table, target_from_spec

from .jobstatus import Problem
from .redisconn import RedisConfigError, _secret_value

CHECK_TIMEOUT = 30.0


SecretReader = Callable[[str, SecretKeyRef], Awaitable[str]]


async def sink_problem(
    namespace: str, spec: ScrapeJobSpec, read_secret: SecretReader = _secret_value
) -> Problem | None:
    """None when the job's sink is ready for its records, else the Stalled reason and message."""
    output = spec.output
    if output is None or output.postgres is None or output.sink != "PostgreSQL":
        return None
    pg = output.postgres
    password = None
    if pg.password_secret_ref is not None:
        try:
            password = await read_secret(namespace, pg.password_secret_ref)
        except RedisConfigError as exc:  # the helper's message is about the Secret, not Redis
            return Problem("SinkSecretUnreadable", f"output.postgres.passwordSecretRef: {exc}")
    target = target_from_spec(pg, password)
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            await ensure_table(target)
    except SchemaMismatch as exc:
        return Problem("SinkSchemaMismatch", f"PostgreSQL {target.describe()}: {exc}")
    except (psycopg.Error, OSError, TimeoutError) as exc:
        message = str(exc).strip() or type(exc).__name__
        return Problem("SinkUnavailable", f"PostgreSQL {target.describe()}: {message}")
    return None
