"""CSV and Parquet outputs against real servers: the S3 sink on MinIO and the Files sink on a directory.

Each record once in files that pyarrow and the csv module read, with the schema the job's spec gives;
the manifest lists exactly the files written, their rows and checksums; a worker dead after its write
or before it costs no duplicate and no loss; a hostile job (huge values, names that try to break a
file or a path) is bounded. Last, a real crawl by worker processes into both sinks as Parquet, one
worker SIGKILLed mid-way: every page exactly once. About 60 s.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis.asyncio as aioredis
from minio import Minio
from pydantic import ValidationError

from trawl.api.common import SecretKeyRef
from trawl.api.scrapejob import ExtractSpec, ScrapeJobSpec
from trawl.api.tabular import MAX_CELL_BYTES, FileFormat
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.redis_server import RedisServer
from trawl.dev.s3_server import S3Server
from trawl.egress.addresses import parse_networks
from trawl.jobspec.podfiles import secret_env_name
from trawl.jobspec.wire import build_job_config
from trawl.operator.job.sinkcheck import finish_sink
from trawl.queue import Queue
from trawl.queue.keys import digests_key, pending_key
from trawl.sinks import s3 as s3sink
from trawl.sinks.base import Record, SinkError, record_key
from trawl.sinks.digests import COUNT_FIELD
from trawl.sinks.s3 import S3Sink, S3Target
from trawl.sinks.tabular import arrow_schema, parts, schema_of_spec
from trawl.sinks.tabularfiles import MANIFEST, FilesSink, job_dir
from waits import wait_for
from worker_procs import start_worker

LOOPBACK = parse_networks(["127.0.0.0/8"])
EXTRACT = ExtractSpec.model_validate(
    {
        "formats": ["links"],
        "fields": [{"name": "price", "selector": ".price"}, {"name": "tags", "selector": ".t", "multiple": True}],
    }
)
SCHEMA = schema_of_spec(EXTRACT)


def dedupe(job_id: str) -> str:
    return f"trawl:{{test/tabular}}:results:{job_id}:keys"


def rec(job: str, i: int, **data: Any) -> Record:
    url = f"http://s.test/{i}"
    fields = {"status": 200, "title": f"Book {i}", "price": f"£{i}", "tags": ["a", "b"], "links": [url + "/x"]}
    return Record(job, url, {"key": record_key(job, url), "job": job, "url": url, **fields, **data})


def new_target(s3: S3Server) -> S3Target:
    bucket = "t-" + uuid.uuid4().hex[:10]
    Minio(f"127.0.0.1:{s3.port}", s3.access_key, s3.secret_key, secure=False).make_bucket(bucket)
    return S3Target(bucket, "out/", s3.endpoint, s3.region, True, s3.access_key, s3.secret_key, LOOPBACK)


def get(target: S3Target, name: str) -> bytes:
    resp = s3sink.client(target).get_object(target.bucket, name)
    try:
        return resp.read()
    finally:
        resp.close()
        resp.release_conn()


def parquet_rows(body: bytes) -> list[dict[str, Any]]:
    table = pq.read_table(io.BytesIO(body))
    assert table.schema.equals(arrow_schema(SCHEMA))  # the job's schema, whatever the batch held
    assert pq.ParquetFile(io.BytesIO(body)).num_row_groups == 1  # one row group per batch
    return list(table.to_pylist())


async def test_parquet_and_csv_to_s3_each_record_once_with_a_true_manifest(
    s3_server: S3Server, redis_client: aioredis.Redis
) -> None:
    for fmt in (FileFormat.PARQUET, FileFormat.CSV):
        await redis_client.delete(digests_key(dedupe("j1")))  # the same job id into a new bucket
        target = new_target(s3_server)
        sink = S3Sink(redis_client, dedupe, target, fmt=fmt, schema=SCHEMA)
        try:
            assert await sink.write("j1", [rec("j1", i) for i in range(5)]) == 5
            again = [rec("j1", 3), rec("j1", 9, rendered=True), rec("j1", 9)]  # a retried batch, a new URL twice
            assert await sink.write("j1", again) == 1
            assert await sink.write("j1", [rec("j1", 4)]) == 0  # nothing new: no empty file
        finally:
            await sink.close()
        objects = s3sink.list_objects(target, "j1")
        assert [o["records"] for o in objects] == [5, 1]
        rows: list[dict[str, Any]] = []
        for obj in objects:
            body = get(target, obj["key"])
            assert obj["sha256"] == hashlib.sha256(body).hexdigest()
            if fmt == FileFormat.PARQUET:
                assert obj["key"].endswith(".parquet")
                rows += parquet_rows(body)
            else:
                reader = csv.DictReader(io.StringIO(body.decode(), newline=""))
                assert reader.fieldnames == [c.name for c in SCHEMA]
                rows += list(reader)
        assert sorted(r["url"] for r in rows) == [f"http://s.test/{i}" for i in (0, 1, 2, 3, 4, 9)]
        last = rows[-1]
        assert json.loads(last["extra"]) == {"rendered": True}
        assert (last["status"], last["price"]) == ((200, "£9") if fmt == FileFormat.PARQUET else ("200", "£9"))
        # trawl results reads the objects back whatever their format
        assert len(s3sink.read_records(target, "j1")) == 6
        await check_s3_manifest(s3_server, target, fmt, objects)


async def check_s3_manifest(s3: S3Server, target: S3Target, fmt: FileFormat, objects: list[dict[str, Any]]) -> None:
    async def secrets(namespace: str, ref: SecretKeyRef) -> str:
        return {"id": s3.access_key, "secret": s3.secret_key}[ref.key]

    refs = {
        "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
        "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
    }
    s3_spec = {
        "bucket": target.bucket,
        "prefix": "out/",
        "endpoint": s3.endpoint,
        "pathStyle": True,
        "format": fmt.value,
    }
    spec = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": ["http://s.test/"],
            "extract": EXTRACT.model_dump(mode="json", by_alias=True, exclude_none=True),
            "output": {"sink": "S3", "s3": s3_spec | refs},
        }
    )
    done = await finish_sink("ns", "books", "j1", spec, {"phase": "Succeeded"}, secrets, allowed=LOOPBACK)
    assert done["manifest"] == f"s3://{target.bucket}/out/j1/manifest.json"
    manifest = json.loads(get(target, "out/j1/manifest.json"))
    assert manifest["objects"] == objects and manifest["records"] == 6  # exactly the files written
    assert manifest["format"] == fmt.value
    assert manifest["schema"][-2:] == [
        {"name": "truncated", "type": "list<string>"},
        {"name": "extra", "type": "string"},
    ]


def files_written(folder: Path, *, killed: bool = False) -> list[str]:
    """The files in the folder but the manifest and its lock; with ``killed``, not the ``.tmp-`` files a worker
    SIGKILLed between its write and its rename left behind either (never published, never in the manifest)."""
    names = (p.name for p in folder.iterdir() if p.name not in (MANIFEST, ".manifest.lock"))
    return sorted(n for n in names if not (killed and n.startswith(".tmp-")))


async def test_files_sink_on_a_volume_with_its_manifest(tmp_path: Path, redis_client: aioredis.Redis) -> None:
    for fmt in (FileFormat.PARQUET, FileFormat.CSV):
        directory = tmp_path / fmt.value
        sink = FilesSink(redis_client, dedupe, str(directory), fmt=fmt, schema=SCHEMA)
        job = "job-" + fmt.value
        assert await sink.write(job, [rec(job, i) for i in range(4)]) == 4
        assert await sink.write(job, [rec(job, 2), rec(job, 7)]) == 1
        folder = directory / job
        manifest = json.loads((folder / MANIFEST).read_text())
        assert [f["file"] for f in manifest["files"]] == files_written(folder)  # exactly the files, no temp file
        assert [f["rows"] for f in manifest["files"]] == [4, 1] and manifest["rows"] == 5
        for entry in manifest["files"]:
            assert entry["sha256"] == hashlib.sha256((folder / entry["file"]).read_bytes()).hexdigest()
        assert manifest["schema"] == [{"name": c.name, "type": c.kind.value} for c in SCHEMA]
        if fmt == FileFormat.PARQUET:
            urls = [r["url"] for f in files_written(folder) for r in parquet_rows((folder / f).read_bytes())]
        else:
            urls = [r["url"] for f in files_written(folder) for r in csv.DictReader((folder / f).open(newline=""))]
        assert sorted(urls) == sorted(f"http://s.test/{i}" for i in (0, 1, 2, 3, 7))


async def test_a_worker_dead_after_its_write_or_before_it_costs_no_duplicate_and_no_loss(
    tmp_path: Path, s3_server: S3Server, redis_client: aioredis.Redis
) -> None:
    batch = [rec("j", i) for i in range(4)]
    files = FilesSink(redis_client, dedupe, str(tmp_path), fmt=FileFormat.PARQUET, schema=SCHEMA)
    s3 = S3Sink(redis_client, dedupe, new_target(s3_server), fmt=FileFormat.PARQUET, schema=SCHEMA)
    try:
        for n, sink in enumerate((files, s3)):
            job = f"j{n}"
            batch = [rec(job, i) for i in range(4)]
            pending = pending_key(dedupe(job))
            # Worker A recorded its part as pending in file X, wrote X, then died (no marks).
            (written,) = parts(FileFormat.PARQUET, SCHEMA, batch[:2])
            name = sink.name(job, written)
            await redis_client.hset(pending, mapping={r.key: name for r in batch[:2]})
            await sink.put(name, written)
            # Worker B recorded the rest as pending in file Y and died before writing it.
            (lost,) = parts(FileFormat.PARQUET, SCHEMA, batch[2:])
            await redis_client.hset(pending, mapping={r.key: sink.name(job, lost) for r in batch[2:]})
            # All four tasks are redelivered to worker C, twice (a retried batch).
            assert await sink.write(job, batch) == 2
            assert await sink.write(job, batch) == 0
            assert await redis_client.hlen(pending) == 0
            assert await redis_client.hget(digests_key(dedupe(job)), COUNT_FIELD) == b"4"
        folder = tmp_path / "j0"
        urls = [r["url"] for f in files_written(folder) for r in parquet_rows((folder / f).read_bytes())]
        assert sorted(urls) == [f"http://s.test/{i}" for i in range(4)]
        manifest = json.loads((folder / MANIFEST).read_text())
        assert manifest["rows"] == 4 and len(manifest["files"]) == 2  # A's file joined the manifest
        assert sorted(r["url"] for r in s3sink.read_records(s3.target, "j1")) == sorted(urls)
    finally:
        await s3.close()


async def test_a_hostile_job_is_bounded(tmp_path: Path, redis_client: aioredis.Redis) -> None:
    # Names that would break a CSV header, a Parquet schema or a path never get past the API.
    for name in ("a,b", 'x"y', "../up", "a\nb", "a/b", ".", ""):
        with pytest.raises(ValidationError):
            ExtractSpec.model_validate({"fields": [{"name": name, "selector": "p"}]})
    for directory in ("/data/../etc", "/data/.", "data"):
        with pytest.raises(ValidationError):
            ScrapeJobSpec.model_validate(
                {"pool": "p", "urls": ["http://s/"], "output": {"sink": "Files", "files": {"directory": directory}}}
            )
    sink = FilesSink(redis_client, dedupe, str(tmp_path), fmt=FileFormat.PARQUET, schema=SCHEMA)
    with pytest.raises(SinkError, match="not a plain name"):
        job_dir(tmp_path, "../escape")
    with pytest.raises(SinkError):
        await sink.write("..", [rec("..", 1)])
    assert os.listdir(tmp_path) == []
    # 5 MB of text in a field, 100,000 tags of 200 bytes, a 3 MB undeclared field: bounded cells, named in truncated.
    huge = rec("h", 1, price="€" * (5 << 20), tags=["tag-" * 50] * 100_000, junk="j" * (3 << 20))
    assert await sink.write("h", [huge, rec("h", 2)]) == 2
    (file,) = files_written(tmp_path / "h")
    rows = parquet_rows((tmp_path / "h" / file).read_bytes())
    big = next(r for r in rows if r["url"].endswith("/1"))
    assert len(big["price"].encode()) <= MAX_CELL_BYTES and sum(len(t) for t in big["tags"]) <= MAX_CELL_BYTES
    assert big["truncated"] == ["price", "tags", "extra"] and big["extra"] is None
    assert (tmp_path / "h" / file).stat().st_size < 4 * MAX_CELL_BYTES


def sink_env(s3: S3Server) -> dict[str, str]:
    return dict(os.environ) | {
        secret_env_name("s3", "id"): s3.access_key,
        secret_env_name("s3", "secret"): s3.secret_key,
    }


async def submit(queue: Queue, spec: ScrapeJobSpec) -> str:
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(build_job_config(job_id, spec, None))
    await queue.enqueue(job_id, spec.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return job_id


async def test_a_crawl_into_parquet_lands_exactly_once_through_a_sigkill(
    redis_server: RedisServer,
    redis_client: aioredis.Redis,
    s3_server: S3Server,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    prefix = "trawl:{test/tabularcrawl}"
    target = new_target(s3_server)
    out_dir = tmp_path / "volume"
    refs = {
        "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
        "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
    }
    outputs = [
        {"sink": "Files", "files": {"directory": str(out_dir), "format": "Parquet"}},
        {
            "sink": "S3",
            "s3": {"bucket": target.bucket, "prefix": "out/", "endpoint": s3_server.endpoint, "pathStyle": True}
            | refs
            | {"format": "Parquet"},
        },
    ]
    shape = {"categories": 4, "books_per_category": 100, "per_page": 25, "latency": 0.02}
    expected = 1 + 4 * 4 + 400
    with Bookstore(host="127.0.0.2", **shape) as site:  # type: ignore[arg-type]
        queue = Queue(redis_client, prefix, lease_seconds=10)
        jobs = []
        for output in outputs:
            spec = ScrapeJobSpec.model_validate(
                {
                    "pool": "tabular",
                    "urls": [site.url + "/"],
                    "crawl": {"maxDepth": 10, "maxPages": 5000, "exclude": ["/private/"]},
                    "politeness": {"requestsPerSecond": 5000, "maxConcurrencyPerDomain": 16},
                    "extract": {"fields": [{"name": "price", "selector": ".price"}], "formats": ["links"]},
                    "output": output,
                }
            )
            jobs.append(await submit(queue, spec))
        common = {"env": sink_env(s3_server), "allowed": "127.0.0.1/32,127.0.0.2/32"}
        a = start_worker(workers, ["--redis-url", redis_server.url], prefix, "tab-a", tmp_path, **common)  # type: ignore[arg-type]
        start_worker(workers, ["--redis-url", redis_server.url], prefix, "tab-b", tmp_path, **common)  # type: ignore[arg-type]

        def some_written() -> bool:
            return (out_dir / jobs[0]).exists() and len(files_written(out_dir / jobs[0], killed=True)) >= 3

        await asyncio.to_thread(wait_for, "three Parquet files written", some_written, 120, 0.1)
        assert not (await queue.job_stats(jobs[0])).finished  # killed mid-crawl
        procs.stop(a, timeout=5, sig=signal.SIGKILL)
        start_worker(workers, ["--redis-url", redis_server.url], prefix, "tab-c", tmp_path, **common)  # type: ignore[arg-type]
        deadline = time.monotonic() + 300
        for job in jobs:
            while not (stats := await queue.job_stats(job)).finished:
                assert time.monotonic() < deadline, stats
                await asyncio.sleep(0.5)
            assert stats.succeeded == stats.total == expected and stats.dead == 0

    folder = out_dir / jobs[0]
    file_rows = [parquet_rows_of(folder / f) for f in files_written(folder, killed=True)]
    urls = Counter(r["url"] for rows in file_rows for r in rows)
    assert len(urls) == expected and set(urls.values()) == {1}  # none lost, none twice
    manifest = json.loads((folder / MANIFEST).read_text())
    assert [f["file"] for f in manifest["files"]] == files_written(folder, killed=True)
    assert [f["rows"] for f in manifest["files"]] == [len(rows) for rows in file_rows]
    s3_urls = Counter(r["url"] for r in s3sink.read_records(target, jobs[1]))
    assert len(s3_urls) == expected and set(s3_urls.values()) == {1}


def parquet_rows_of(path: Path) -> list[dict[str, Any]]:
    table = pq.read_table(path)
    assert pa.types.is_int64(table.schema.field("status").type)
    return list(table.to_pylist())
