"""WARC capture and re-extraction against real servers: the bookstore on loopback, MinIO, and warcio reading
what was written. Every record readable with matching digests, rotation, CDXJ lookups, a crash's open file
recovered, a huge page truncated and counted, and re-extraction giving the crawl's records with zero requests
to the site. About 15 s.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from minio import Minio
from prometheus_client import CollectorRegistry
from warcio.archiveiterator import ArchiveIterator

from sites import bookstore_fixture
from trawl.api.archive import REEXTRACT_URL
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.archive import cdx
from trawl.archive.capture import Capture
from trawl.archive.stores import S3Store, Store, VolumeStore
from trawl.archive.writer import OPEN, ArchiveLimits, ArchiveWriter
from trawl.dev.bookstore import Bookstore
from trawl.dev.s3_server import S3Server
from trawl.egress.addresses import parse_networks
from trawl.jobspec.podfiles import secret_env_name
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.sinks.base import Record
from trawl.sinks.s3 import S3Target
from trawl.worker.archiving import S3_SPOOL, AsyncArchive, capture_of
from trawl.worker.extract import ExtractOptions, Extractor, FieldSpec
from trawl.worker.fetch import Fetcher, FetchLimits
from trawl.worker.metrics import WorkerMetrics
from trawl.worker.reextract import ReextractCounts, extractor_call, reextract
from trawl.worker.runner import Worker, WorkerConfig

LOOPBACK = parse_networks(["127.0.0.0/8"])
site = bookstore_fixture("module")
RULES = ExtractOptions(
    fields=(FieldSpec("name", "h1"), FieldSpec("price", ".price")),
    formats=ExtractOptions.from_dict({"formats": ["markdown", "links"]}).formats,
)
VOLATILE = ("fetchedAt", "attempt", "key", "job")


def s3_store(s3: S3Server) -> S3Store:
    bucket = "w-" + uuid.uuid4().hex[:10]
    Minio(f"127.0.0.1:{s3.port}", s3.access_key, s3.secret_key, secure=False).make_bucket(bucket)
    target = S3Target(bucket, "archive/", s3.endpoint, s3.region, True, s3.access_key, s3.secret_key, LOOPBACK)
    return S3Store(target, "archive/team-a/crawl-1/")


async def crawl(site: Bookstore, urls: list[str], writer: ArchiveWriter) -> list[Record]:
    """Fetch ``urls`` as a worker does, capture each response, and extract the crawl's records."""
    archive = AsyncArchive(writer)
    extractor = Extractor(RULES)
    out: list[Record] = []
    async with Fetcher(allowed=LOOPBACK) as fetcher:
        for url in urls:
            result = await fetcher.fetch(url, limits=FetchLimits(max_bytes=80 * 1024 * 1024))
            capture = capture_of(url, result, depth=1)
            await archive.capture(capture)
            ctype = result.content_type + (f"; charset={result.charset}" if result.charset else "")
            page = extractor.extract(result.body, url, content_type=ctype)
            item_fields = {"finalUrl": result.final_url, "status": result.status, "depth": 1, **page.data}
            out.append(Record("crawl", url, {"url": url, **item_fields}))
    await archive.close()
    return out


def stable(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in VOLATILE}


def check_valid(store: Store) -> int:
    """Every record of every file readable, digests checked; returns the response records."""
    count = 0
    for name in store.names():
        with store.open_warc(name) as fh:
            for record in ArchiveIterator(fh, check_digests="raise"):
                record.content_stream().read()
                assert record.rec_headers.get_header("WARC-Payload-Digest")
                count += record.rec_type == "response"
    return count


@pytest.mark.parametrize("kind", ["s3", "volume"])
async def test_capture_rotate_index_reextract(kind: str, site: Bookstore, s3_server: S3Server, tmp_path: Path) -> None:
    store: Store = s3_store(s3_server) if kind == "s3" else VolumeStore(tmp_path / "archive")
    writer = ArchiveWriter(store, tmp_path / "spool", writer_id="w1", limits=ArchiveLimits(max_file_bytes=8_000))
    urls = [site.product_url(i) for i in range(1, 21)] + [site.url + "/"]
    crawled = await crawl(site, urls, writer)

    assert writer.counts.records == len(urls) and writer.counts.dropped == 0 and writer.counts.lost == 0
    names = store.names()
    assert len(names) >= 3, names  # rotated at 8 kB
    assert writer.counts.files == len(names)
    assert check_valid(store) == len(urls)

    entries = [e for n in names for e in cdx.parse(store.read_index(n))]
    for url in urls:  # each URL's record found by its index entry, and at that offset is its response
        (hit,) = cdx.lookup(entries, url)
        with store.open_warc(hit.fields["filename"]) as fh:
            data = fh.read()
        member = data[int(hit.fields["offset"]) : int(hit.fields["offset"]) + int(hit.fields["length"])]
        record = next(iter(ArchiveIterator(io.BytesIO(member), check_digests="raise")))
        assert record.rec_headers.get_header("WARC-Target-URI") == url

    before = len(site.entries())
    counts = ReextractCounts()
    again = list(reextract(store, "reextract-1", extractor_call(Extractor(RULES)), counts))
    assert len(site.entries()) == before  # zero requests to the site
    assert counts.responses == len(urls) and counts.records == len(urls) and not counts.broken_files
    assert sorted((stable(r.data) for r in again), key=lambda d: d["url"]) == sorted(
        (stable(r.data) for r in crawled), key=lambda d: d["url"]
    )


async def test_huge_response_truncated_and_counted(site: Bookstore, tmp_path: Path) -> None:
    store = VolumeStore(tmp_path / "archive")
    limits = ArchiveLimits(max_record_bytes=1024 * 1024)
    writer = ArchiveWriter(store, tmp_path / "spool", writer_id="w1", limits=limits)
    await crawl(site, [site.url + "/hostile/huge", site.product_url(1)], writer)
    assert writer.counts.records == 2 and writer.counts.truncated == 1
    (name,) = store.names()
    assert (tmp_path / "archive" / name).stat().st_size < 2 * 1024 * 1024  # 64 MiB page, record under 1 MiB
    with store.open_warc(name) as fh:
        cut = [r.rec_headers.get_header("WARC-Truncated") for r in ArchiveIterator(fh) if r.rec_type == "response"]
    assert cut == ["length", None]
    assert check_valid(store) == 2


def test_crash_leaves_no_corrupt_file_and_counts_the_cut_record(tmp_path: Path) -> None:
    """A writer killed mid-write leaves its spool file; readers never see it, the next writer publishes its
    whole records and counts the cut one."""
    store = VolumeStore(tmp_path / "archive")
    dead = ArchiveWriter(store, tmp_path / "spool", writer_id="w1")
    for i in range(3):
        dead.add(
            Capture(f"http://a.test/{i}", f"http://a.test/{i}", 200, {"Content-Type": "text/html"}, b"x" * 500, 1.7e9)
        )
    (spool_file,) = (tmp_path / "spool").glob(f"*{OPEN}")
    data = spool_file.read_bytes()
    spool_file.write_bytes(data[: len(data) - 100])  # the kill: the last record half written
    assert store.names() == []  # nothing published, nothing half-visible

    heir = ArchiveWriter(store, tmp_path / "spool", writer_id="w2")
    heir.recover()
    assert heir.counts.lost == 1 and heir.counts.records == 2
    assert check_valid(store) == 2
    assert list((tmp_path / "spool").iterdir()) == []


def test_store_refusing_keeps_then_drops_and_counts(tmp_path: Path) -> None:
    class Refusing(VolumeStore):
        def publish(self, name: str, warc: Path, index: bytes) -> None:
            raise OSError("store down")

    writer = ArchiveWriter(
        Refusing(tmp_path / "a"), tmp_path / "spool", writer_id="w", limits=ArchiveLimits(max_spool_files=2)
    )
    for i in range(4):
        writer.add(Capture(f"http://a.test/{i}", f"http://a.test/{i}", 200, {}, b"y", 1.7e9))
        writer.rotate()
    assert writer.counts.records == 0 and writer.counts.dropped == 2
    assert len(list((tmp_path / "spool").glob("*.ready"))) == 2


def test_a_gone_writers_spool_is_adopted_once_stale(tmp_path: Path) -> None:
    """A pod that died (its spool on the shared volume, its name never back): another writer of the job
    publishes its files once they are stale, and leaves a live writer's alone."""
    store = VolumeStore(tmp_path / "archive")
    spool = tmp_path / "archive" / ".spool"
    gone = ArchiveWriter(store, spool / "gone", writer_id="gone")
    page = Capture("http://a.test/1", "http://a.test/1", 200, {"Content-Type": "text/html"}, b"z" * 300, 1.7e9)
    gone.add(page)
    heir = ArchiveWriter(store, spool / "heir", writer_id="heir")
    heir.add(page)  # the heir's own open file is never taken for a dead writer's
    assert heir.adopt_stale(older_than=3600) == 0 and store.names() == []
    assert heir.adopt_stale(older_than=0) == 1
    assert heir.counts.records == 1 and len(store.names()) == 1
    heir.close()
    assert heir.counts.records == 2 and check_valid(store) == 2
    assert list(spool.glob("*/*")) == []


async def run_worker_job(
    redis: aioredis.Redis, spec: dict[str, Any], wire: dict[str, Any], seeds: list[str]
) -> list[dict[str, Any]]:
    """One job run to its end by a real worker; ``wire``: what the operator adds to its worker spec."""
    job = ScrapeJobSpec.model_validate({"pool": "p", "politeness": {"requestsPerSecond": 1000}, **spec})
    job_id = uuid.uuid4().hex[:12]
    config = build_job_config(job_id, job, ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}}))
    config.spec.update(wire)
    prefix = "trawl:{test/warc}"
    queue = Queue(redis, prefix, lease_seconds=10)
    await queue.register_job(config)
    await queue.enqueue(job_id, seeds)
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=prefix, worker_id="w-" + job_id, concurrency=4, allowed_cidrs=["127.0.0.0/8"]),
        queue,
        redis,
        Keys(prefix),
        metrics=WorkerMetrics(CollectorRegistry()),
    )
    runner = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 120
        while not (await queue.job_stats(job_id)).finished:
            assert time.monotonic() < deadline and not runner.done()
            await asyncio.sleep(0.05)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (len(seeds), 0), await queue.dead_letters(job_id)
    return [json.loads(f[b"data"]) for _id, f in await redis.xrange(Keys(prefix).results(job_id))]


async def test_a_worker_captures_to_s3_and_a_job_reextracts_from_it(
    site: Bookstore, s3_server: S3Server, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's S3 archive location: files uploaded whole with their index, then a re-extraction job
    reads them back with no request to the site."""
    store = s3_store(s3_server)
    monkeypatch.setenv(secret_env_name("s3", "id"), s3_server.access_key)
    monkeypatch.setenv(secret_env_name("s3", "secret"), s3_server.secret_key)
    location = {
        "s3": {
            "bucket": store.target.bucket,
            "prefix": "archive/",
            "endpoint": s3_server.endpoint,
            "region": s3_server.region,
            "pathStyle": True,
            "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
            "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
        },
        "prefix": store.prefix,
    }
    extract = {"fields": [{"name": "name", "selector": "h1"}]}
    urls = [site.product_url(i) for i in range(1, 16)]
    try:
        capture = {"archive": {**location, "max_record_bytes": 1 << 20, "max_file_bytes": 10_000}}
        records = await run_worker_job(redis_client, {"urls": urls, "extract": extract, "archive": {}}, capture, urls)
        assert len(store.names()) >= 2 and check_valid(store) == len(urls)
        before = len(site.entries())
        spec = {"archiveSource": {"job": "crawl-1"}, "extract": extract}
        again = await run_worker_job(redis_client, spec, {"archive_source": location}, [REEXTRACT_URL])
        assert len(site.entries()) == before
        assert sorted(map(stable, again), key=str) == sorted(map(stable, records), key=str)
    finally:
        shutil.rmtree(S3_SPOOL / hashlib.blake2b(store.prefix.encode(), digest_size=8).hexdigest(), True)
