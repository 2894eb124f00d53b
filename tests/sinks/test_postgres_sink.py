"""The PostgreSQL sink against a real server: one row per (job, URL), schema checked, outages retried."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from trawl.api.common import SecretKeyRef
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.clitools import results
from trawl.clitools.exits import CliError
from trawl.dev.postgres_server import PostgresServer
from trawl.egress.addresses import parse_networks
from trawl.operator.job.sinkcheck import sink_problem
from trawl.sinks.base import Record, SinkError, record_key
from trawl.sinks.postgres import PgTarget, PostgresSink, SchemaMismatch, ensure_table

LOOPBACK = parse_networks(["127.0.0.0/8"])


def target(pg: PostgresServer, table: str, **kw: Any) -> PgTarget:
    return PgTarget(
        host="127.0.0.1",
        port=kw.pop("port", pg.port),
        database=pg.database,
        user=pg.user,
        password=kw.pop("password", pg.password),
        table=table,
        ssl_mode="disable",
        connect_timeout=5,
        allowed=LOOPBACK,  # the server is on loopback: the pool's allowedCidrs name it
        **kw,
    )


def table_name() -> str:
    return "t_" + uuid.uuid4().hex[:10]


def rec(job: str, url: str, **data: Any) -> Record:
    return Record(job, url, {"key": record_key(job, url), "job": job, "url": url, **data})


async def rows(pg: PostgresServer, table: str) -> list[tuple[str, str, dict[str, Any]]]:
    async with await psycopg.AsyncConnection.connect(pg.dsn()) as conn:
        cur = await conn.execute(f"SELECT job, url, data FROM {table} ORDER BY job, url")
        return [(str(j), str(u), dict(d)) for j, u, d in await cur.fetchall()]


async def test_one_row_per_job_url_whatever_is_redelivered(pg_server: PostgresServer) -> None:
    table = "sinktest." + table_name()  # schema-qualified: the schema is created too
    tgt = target(pg_server, table)
    await ensure_table(tgt)
    await ensure_table(tgt)  # accepting a second job checks the same table and passes
    sink = PostgresSink(tgt)
    try:
        first = [rec("j1", f"http://s.test/{i}", n=i) for i in range(5)]
        assert await sink.write("j1", first) == 5
        # a redelivered task writes its record again, among new ones and a duplicate within the batch
        again = [rec("j1", "http://s.test/3", n=33), rec("j1", "http://s.test/9", n=9), rec("j1", "http://s.test/9")]
        assert await sink.write("j1", again) == 1
        assert await sink.write("j2", [rec("j2", "http://s.test/3", text="nul\x00byte")]) == 1  # other job: new
        got = await rows(pg_server, table)
        assert [(j, u) for j, u, _ in got] == [("j1", f"http://s.test/{i}") for i in (0, 1, 2, 3, 4, 9)] + [
            ("j2", "http://s.test/3")
        ]
        assert got[3][2]["n"] == 3  # the first write wins
        assert got[-1][2]["text"] == "nulbyte"  # jsonb cannot hold U+0000: dropped, the record kept
    finally:
        await sink.close()


async def test_a_table_of_another_shape_is_refused(pg_server: PostgresServer) -> None:
    table = table_name()
    async with await psycopg.AsyncConnection.connect(pg_server.dsn(), autocommit=True) as conn:
        await conn.execute(f"CREATE TABLE {table} (key text, job text, url text, data text)")
    with pytest.raises(SchemaMismatch) as info:
        await ensure_table(target(pg_server, table))
    message = str(info.value)
    assert "column data is text, not jsonb" in message
    assert "column written_at is missing" in message  # an existing table is checked, never altered
    assert "no primary key or unique index" in message


async def test_acceptance_check_names_the_problem(pg_server: PostgresServer) -> None:
    async def secrets(namespace: str, ref: SecretKeyRef) -> str:  # what the operator reads from the API
        assert (namespace, ref.name, ref.key) == ("ns", "pg", "password")
        return pg_server.password

    def spec(**pg: Any) -> ScrapeJobSpec:
        base = {
            "host": "127.0.0.1",
            "port": pg_server.port,
            "database": pg_server.database,
            "user": pg_server.user,
            "passwordSecretRef": {"name": "pg", "key": "password"},
        }
        return ScrapeJobSpec.model_validate(
            {"pool": "p", "urls": ["http://s.test/"], "output": {"sink": "PostgreSQL", "postgres": base | pg}}
        )

    bad_table = table_name()
    async with await psycopg.AsyncConnection.connect(pg_server.dsn(), autocommit=True) as conn:
        await conn.execute(f"CREATE TABLE {bad_table} (id int)")
    mismatch = await sink_problem("ns", spec(table=bad_table, sslMode="disable"), secrets, allowed=LOOPBACK)
    assert mismatch is not None and mismatch.reason == "SinkSchemaMismatch"
    assert "column key is missing" in mismatch.message
    assert await sink_problem("ns", spec(table=table_name(), sslMode="disable"), secrets, allowed=LOOPBACK) is None
    # no password: the server demands one (scram-sha-256)
    refused = await sink_problem("ns", spec(sslMode="disable", passwordSecretRef=None), allowed=LOOPBACK)
    assert refused is not None and refused.reason == "SinkUnavailable"
    assert "password" in refused.message
    # nothing listens there
    from trawl.dev.procs import free_port

    down = await sink_problem(
        "ns", spec(port=free_port(), sslMode="disable", connectTimeoutSeconds=3), secrets, allowed=LOOPBACK
    )
    assert down is not None and down.reason == "SinkUnavailable"
    assert "connection" in down.message.lower()


async def test_an_outage_is_a_sink_error_and_a_restart_needs_no_new_sink(pg_server: PostgresServer) -> None:
    table = table_name()
    tgt = target(pg_server, table)
    await ensure_table(tgt)
    sink = PostgresSink(tgt)
    try:
        assert await sink.write("j", [rec("j", "http://s.test/a")]) == 1  # connection open before the outage
        pg_server.stop()
        try:
            # The Finisher keeps the record and writes it again later (tests/integration/test_worker_finish.py).
            with pytest.raises(SinkError, match="unavailable"):
                await sink.write("j", [rec("j", "http://s.test/b")])
        finally:
            await asyncio.to_thread(pg_server.start)
        assert await sink.write("j", [rec("j", "http://s.test/b"), rec("j", "http://s.test/a")]) == 1
        # a connection that went stale across a restart is replaced within the same write
        pg_server.stop()
        await asyncio.to_thread(pg_server.start)
        assert await sink.write("j", [rec("j", "http://s.test/c")]) == 1
        assert [u for _j, u, _d in await rows(pg_server, table)] == [f"http://s.test/{x}" for x in "abc"]
    finally:
        await sink.close()


async def test_trawl_results_reads_the_table_back_in_every_format(pg_server: PostgresServer) -> None:
    table = table_name()
    await ensure_table(target(pg_server, table))
    sink = PostgresSink(target(pg_server, table))
    try:
        await sink.write("job-uid", [rec("job-uid", f"http://s.test/{i}", status=200, price=f"£{i}") for i in range(3)])
        await sink.write("job-uid", [rec("job-uid", "http://s.test/3", status=200, tags=["a", "b"])])
        await sink.write("other", [rec("other", "http://s.test/0", status=200)])
    finally:
        await sink.close()
    job = {
        "metadata": {"name": "books", "uid": "job-uid"},
        "spec": {
            "pool": "p",
            "urls": ["http://s.test/"],
            "output": {
                "sink": "PostgreSQL",
                "postgres": {"host": "db.invalid", "database": pg_server.database, "user": pg_server.user,
                             "table": table, "sslMode": "disable"},
            },
        },
        "status": {"results": {"sink": "PostgreSQL", "count": 4}},
    }  # fmt: skip
    results.check_sink(job)  # readable: no "cannot be read back" error
    # the spec's host is cluster-internal; --postgres-address reaches it through a port-forward
    tgt = results.postgres_target(job, pg_server.password, f"127.0.0.1:{pg_server.port}")
    out = io.StringIO()
    assert await results.export_postgres(tgt, "job-uid", "jsonl", out) == 4
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert sorted(x["url"] for x in lines[:3]) == [f"http://s.test/{i}" for i in range(3)]
    assert lines[3]["url"] == "http://s.test/3"  # in the order written (within a batch: insert order)
    assert {x["url"]: x.get("price") for x in lines}["http://s.test/1"] == "£1" and lines[3]["tags"] == ["a", "b"]
    out = io.StringIO()
    assert await results.export_postgres(tgt, "job-uid", "csv", out) == 4
    assert out.getvalue().splitlines()[0] == "url,status,price,tags"
    assert "http://s.test/1,200,£1," in out.getvalue().splitlines()
    assert out.getvalue().splitlines()[4] == 'http://s.test/3,200,,"[""a"",""b""]"'
    with pytest.raises(CliError, match="cannot read PostgreSQL"):
        await results.export_postgres(replace(tgt, password="wrong"), "job-uid", "jsonl", io.StringIO())
