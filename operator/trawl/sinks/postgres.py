"""PostgreSQL sink: records upserted into one table shared by jobs, exactly one row per (job, URL).

Table layout (created when missing by :func:`ensure_table`, which the operator runs when it accepts a
job, so a wrong schema or an unreachable server shows on the ScrapeJob before anything is fetched)::

    key        text PRIMARY KEY   -- record_key(job, url): a hash of (job, URL)
    job        text NOT NULL      -- the ScrapeJob's UID
    url        text NOT NULL
    data       jsonb NOT NULL     -- the whole record, as every sink writes it
    written_at timestamptz NOT NULL DEFAULT now()

The primary key is the hash rather than (job, url) itself because a btree entry is limited to about
2.7 kB and discovered URLs can be longer. A batch is one ``INSERT … SELECT FROM unnest(arrays) ON
CONFLICT (key) DO NOTHING``: one round trip per batch, and a redelivered task (a worker killed after
the commit, before the ack) inserts nothing the second time. No Redis bookkeeping is needed: the
database itself is the dedupe set, so the write and the dedupe are one transaction. A failed write
raises :class:`SinkError`; the Finisher keeps the record and retries it (``trawl.worker.finish``).

The job's author chooses the server, and the pool's password goes to it. So the host is one name or
address (the model refuses libpq's host lists and socket paths), connected to only at addresses the
pool's rule allows (:mod:`trawl.egress.sinkaddr`), and libpq refuses to send the password in cleartext
(``require_auth=!password``) unless the pool allows it (``worker.allowCleartextPostgresPassword``):
a server of the job's choosing would otherwise simply ask for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from trawl.api.scrapejob import PostgresSink as PostgresSpec
from trawl.api.scrapejob import pg_host_problem
from trawl.egress.addresses import BlockedAddressError, IPNetwork
from trawl.egress.sinkaddr import resolve_sink_host

from .base import Record, SinkError

# column -> the type information_schema reports for it
COLUMNS = {
    "key": "text",
    "job": "text",
    "url": "text",
    "data": "jsonb",
    "written_at": "timestamp with time zone",
}


class SchemaMismatch(Exception):
    """The table exists but cannot hold Trawl's records (missing column, other type, no unique key)."""


@dataclass(frozen=True, slots=True)
class PgTarget:
    """Where to connect and which table to write; the password comes from a mounted Secret."""

    host: str
    port: int
    database: str
    user: str
    password: str | None
    table: str  # "name" or "schema.name"
    ssl_mode: str = "prefer"
    connect_timeout: int = 10
    allowed: tuple[IPNetwork, ...] = ()  # the pool's worker.allowedCidrs: the only non-global addresses allowed
    cleartext_password: bool = False  # the pool's worker.allowCleartextPostgresPassword

    def conninfo(self, hostaddr: Sequence[str] = ()) -> str:
        """``hostaddr``: the addresses to connect to (checked by :func:`checked_conninfo`); libpq then does
        no lookup of its own, and ``host`` names them (TLS verification, messages)."""
        params: dict[str, Any] = {
            "host": ",".join([self.host] * len(hostaddr)) if hostaddr else self.host,
            "port": self.port,
            "dbname": self.database,
            "user": self.user,
            "sslmode": self.ssl_mode,
            "connect_timeout": self.connect_timeout,
            "application_name": "trawl",
        }
        if hostaddr:
            params["hostaddr"] = ",".join(hostaddr)
        if not self.cleartext_password:
            params["require_auth"] = "!password"  # libpq 16+: never answer a cleartext password request
        if self.password is not None:
            params["password"] = self.password
        return psycopg.conninfo.make_conninfo(**params)

    @property
    def schema_and_name(self) -> tuple[str | None, str]:
        schema, _, name = self.table.rpartition(".")
        return (schema or None), name

    def identifier(self) -> sql.Identifier:
        schema, name = self.schema_and_name
        return sql.Identifier(schema, name) if schema else sql.Identifier(name)

    def describe(self) -> str:
        """The location shown on the job's status (no password)."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database} table {self.table}"


async def checked_conninfo(target: PgTarget) -> str:
    """The target's connection string, pinned to its host's addresses once each is allowed
    (:mod:`trawl.egress.sinkaddr`; ``BlockedAddressError``, an ``OSError``, when one is not, or when the
    host is not one server: a list or a socket path, refused by the model, from a spec stored before)."""
    problem = pg_host_problem(target.host)
    if problem is not None:
        raise BlockedAddressError(f"refused: {problem}")
    return target.conninfo(await resolve_sink_host(target.host, target.port, target.allowed))


async def connect(target: PgTarget) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(await checked_conninfo(target), autocommit=True)


async def ensure_table(target: PgTarget) -> None:
    """Create the table when missing; check its columns and unique key when present.

    Raises :class:`SchemaMismatch` for a table that cannot hold the records, ``psycopg.Error`` or
    ``OSError`` when the server cannot be reached or refuses (credentials, permissions).
    """
    schema, name = target.schema_and_name
    ident = target.identifier()
    async with await connect(target) as conn:
        if schema:
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, job text NOT NULL, url text NOT NULL, "
                "data jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        cur = await conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = coalesce(%s, current_schema()) AND table_name = %s",
            (schema, name),
        )
        found = {str(col): str(kind) for col, kind in await cur.fetchall()}
        problems = [
            f"column {col} is missing" if col not in found else f"column {col} is {found[col]}, not {kind}"
            for col, kind in COLUMNS.items()
            if found.get(col) != kind
        ]
        cur = await conn.execute(
            "SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indnatts = 1 AND a.attname = 'key'",
            (ident.as_string(conn),),
        )
        if await cur.fetchone() is None:
            problems.append("column key has no primary key or unique index")
        if problems:
            raise SchemaMismatch(f"table {target.table} exists but cannot hold Trawl records: {'; '.join(problems)}")
        # For reading a job's records back in order (trawl results).
        await conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (job, written_at)").format(
                sql.Identifier(f"{name}_job_idx"[:63]), ident
            )
        )


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _strip_nul(value: Any) -> Any:
    """jsonb cannot store U+0000; pages sometimes contain it, so it is dropped from every string."""
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {_strip_nul(k): _strip_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_nul(v) for v in value]
    return value


class PostgresSink:
    """One connection per sink (batches of a lane are written one at a time anyway), reopened on error."""

    def __init__(self, target: PgTarget) -> None:
        self.target = target
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        ident = target.identifier()
        self._insert = sql.SQL(
            # clock_timestamp(), not the column default now(): rows of one batch keep their order
            "INSERT INTO {} (key, job, url, data, written_at) "
            "SELECT k, j, u, d::jsonb, clock_timestamp() "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS r(k, j, u, d) "
            "ON CONFLICT (key) DO NOTHING"
        ).format(ident)

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        unique: dict[str, Record] = {}
        for rec in records:
            unique.setdefault(rec.key, rec)
        if not unique:
            return 0
        recs = list(unique.values())
        args = (
            [r.key for r in recs],
            [r.job_id for r in recs],
            [r.url for r in recs],
            [json.dumps(_strip_nul(r.data), ensure_ascii=False, separators=(",", ":"), default=str) for r in recs],
        )
        # One write per call: a failure goes back to the Finisher, which keeps the record (lease held,
        # page not refetched) and writes it again with backoff. Only a connection that was already
        # open is retried at once, on a fresh one: after a server restart it is simply stale.
        async with self._lock:
            reused = self._conn is not None and not self._conn.closed
            while True:
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = await connect(self.target)
                    cur = await self._conn.execute(self._insert, args)
                    return max(cur.rowcount, 0)
                except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
                    await self._drop()
                    if reused:
                        reused = False
                        continue
                    raise SinkError(f"postgresql {self.target.describe()} unavailable: {_one_line(exc)}") from exc
                except psycopg.Error as exc:
                    await self._drop()
                    raise SinkError(f"postgresql write to {self.target.table} failed: {_one_line(exc)}") from exc

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    async def close(self) -> None:
        async with self._lock:
            await self._drop()


def target_from_spec(
    spec: PostgresSpec,
    password: str | None,
    *,
    allowed: Sequence[IPNetwork] = (),
    cleartext_password: bool = False,
) -> PgTarget:
    """The target a job's spec names, with its pool's address rule and cleartext-password choice."""
    return PgTarget(
        host=spec.host,
        port=spec.port,
        database=spec.database,
        user=spec.user,
        password=password,
        table=spec.table,
        ssl_mode=spec.ssl_mode,
        connect_timeout=spec.connect_timeout_seconds,
        allowed=tuple(allowed),
        cleartext_password=cleartext_password,
    )


async def read_records(target: PgTarget, job_id: str, page: int = 1000) -> AsyncGenerator[dict[str, Any], None]:
    """A job's records in the order written (``trawl results``), streamed by a server-side cursor."""
    query = sql.SQL("SELECT data FROM {} WHERE job = %s ORDER BY written_at, key").format(target.identifier())
    async with (
        await psycopg.AsyncConnection.connect(await checked_conninfo(target)) as conn,
        conn.cursor(name="trawl_results") as cur,
    ):
        cur.itersize = page
        await cur.execute(query, (job_id,))
        async for (data,) in cur:
            yield dict(data)
