"""WARC capture through a real worker, and the archive admission through the operator's own job pass, on a
real redis-server and the bookstore on loopback: every page a job fetches lands in published WARC files
(valid under warcio, digests checked), the counts reach the job's notes, a re-extraction of the archive
gives the stream's records with no request to the site, and a job naming another namespace's archive or a
path out of its own is Stalled with reason ArchiveSourceRefused and a Warning Event. About 20 s."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from warcio.archiveiterator import ArchiveIterator

from job_passes import JobPasses, one_pool
from sites import bookstore_fixture
from trawl.api.archive import REEXTRACT_URL
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.archive.stores import VolumeStore
from trawl.dev.bookstore import Bookstore
from trawl.dev.redis_server import RedisServer
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.notes import JobNotes
from trawl.worker.extract import ExtractOptions, Extractor
from trawl.worker.metrics import WorkerMetrics
from trawl.worker.reextract import ReextractCounts, extractor_call, reextract
from trawl.worker.runner import Worker, WorkerConfig

PREFIX = "trawl:{test/archive}"
site = bookstore_fixture("module", host="127.0.0.2")
ALLOWED = ["127.0.0.2/32"]
EXTRACT = {"fields": [{"name": "name", "selector": "h1"}, {"name": "price", "selector": ".price"}]}
VOLATILE = ("key", "job", "attempt", "fetchedAt")


async def run_job(
    redis: aioredis.Redis, spec: dict[str, Any], wire: dict[str, Any], seeds: list[str]
) -> tuple[str, list[dict[str, Any]]]:
    """One job run to its end by a real worker; ``wire``: what the operator adds to its worker spec."""
    job = ScrapeJobSpec.model_validate({"pool": "p", "politeness": {"requestsPerSecond": 1000}, **spec})
    pool = ScrapePoolSpec.model_validate({"redis": {"url": "redis://redis:6379/0"}})
    job_id = uuid.uuid4().hex[:12]
    config = build_job_config(job_id, job, pool)
    config.spec.update(wire)
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(config)
    await queue.enqueue(job_id, seeds)
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=4, allowed_cidrs=ALLOWED),
        queue,
        redis,
        Keys(PREFIX),
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
        await asyncio.wait_for(runner, 30)  # a stopping worker publishes its open WARC file
    stats = await queue.job_stats(job_id)
    if spec.get("archiveSource", {}).get("job") == "nothing-here":
        assert (stats.succeeded, stats.dead) == (0, 1)
    else:
        assert (stats.succeeded, stats.dead) == (len(seeds), 0), await queue.dead_letters(job_id)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    return job_id, [json.loads(f[b"data"]) for _id, f in entries]


async def test_worker_captures_every_page_and_the_archive_reextracts_with_no_request(
    redis_client: aioredis.Redis, site: Bookstore, tmp_path: Path
) -> None:
    urls = [site.product_url(i) for i in range(1, 31)]
    directory = tmp_path / "team-a" / "crawl-1"
    # What the operator adds for a capturing job (trawl.operator.job.reconcile), 12 kB files to rotate.
    capture = {"archive": {"directory": str(directory), "max_record_bytes": 1 << 20, "max_file_bytes": 12 << 10}}
    job_id, records = await run_job(redis_client, {"urls": urls, "extract": EXTRACT, "archive": {}}, capture, urls)
    counts = await JobNotes(redis_client, Keys(PREFIX).job).archive_counts(job_id)
    assert counts == {"records": len(urls), "truncated": 0, "dropped": 0, "lost": 0}  # status.archive
    store = VolumeStore(directory)
    names = store.names()
    assert len(names) >= 2  # rotated
    assert list(directory.glob(".spool/*/*")) == []  # nothing left behind
    responses = 0
    for name in names:
        with store.open_warc(name) as fh:
            for record in ArchiveIterator(fh, check_digests="raise"):
                record.content_stream().read()
                responses += record.rec_type == "response"
    assert responses == len(urls)

    before = len(site.entries())
    counts = ReextractCounts()
    extractor = Extractor(ExtractOptions.from_dict(EXTRACT))
    again = [r.data for r in reextract(store, "again", extractor_call(extractor), counts)]
    assert len(site.entries()) == before  # not one request
    assert stable(again) == stable(records)

    # The same as a job: a worker runs its one task over the archive into the job's sink (here its stream).
    source = {"archive_source": {"directory": str(directory) + "/"}}
    spec = {"archiveSource": {"job": "crawl-1"}, "extract": EXTRACT}
    rerun_id, rerun = await run_job(redis_client, spec, source, [REEXTRACT_URL])
    assert len(site.entries()) == before
    read = await JobNotes(redis_client, Keys(PREFIX).job).archive_counts(rerun_id)  # its status.archive
    assert read == {"records": 0, "truncated": 0, "dropped": 0, "lost": 0, "read": len(urls)}
    assert stable(rerun) == stable(records)


def stable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: v for k, v in r.items() if k not in VOLATILE} for r in records), key=str)


POOL = {
    "redis": {"url": ""},
    "archive": {"directory": "/archive"},
    "worker": {
        "volumes": [{"name": "archive", "persistentVolumeClaim": {"claimName": "warc"}}],
        "volumeMounts": [{"name": "archive", "mountPath": "/archive"}],
    },
}


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ({"job": "crawl-1", "namespace": "team-b"}, "namespace 'team-b'"),
        ({"path": "../team-b/crawl-1"}, "not a plain name"),
        ({"path": "/etc"}, "must be relative"),
    ],
)
async def test_hostile_archive_source_is_stalled_with_an_event(
    redis_server: RedisServer, source: dict[str, Any], said: str
) -> None:
    pool = POOL | {"redis": {"url": redis_server.url}}
    spec = {"pool": "p", "archiveSource": source}
    job = JobPasses("reextract", uuid.uuid4().hex, spec, one_pool("team-a", "p", pool), namespace="team-a")
    await job.run()
    stalled = job.condition("Stalled")
    assert stalled is not None and (stalled["status"], stalled["reason"]) == ("True", "ArchiveSourceRefused")
    assert said in stalled["message"]
    assert any(e.reason == "ArchiveSourceRefused" and e.type == "Warning" for e in job.events), job.events
    assert not job.status.get("enqueued")


async def test_capture_needs_the_pools_archive(redis_server: RedisServer) -> None:
    pool = {"redis": {"url": redis_server.url}}
    spec = {"pool": "p", "urls": ["https://example.com/"], "archive": {}}
    job = JobPasses("crawl", uuid.uuid4().hex, spec, one_pool("team-a", "p", pool), namespace="team-a")
    await job.run()
    stalled = job.condition("Stalled")
    assert stalled is not None and stalled["reason"] == "ArchiveNotConfigured"


async def test_own_archive_source_is_admitted_with_one_task(redis_server: RedisServer) -> None:
    pool = POOL | {"redis": {"url": redis_server.url}}
    spec = {"pool": "p", "archiveSource": {"path": "crawl-1/2026"}}
    job = JobPasses("reextract", uuid.uuid4().hex, spec, one_pool("team-a", "p", pool), namespace="team-a")
    await job.run()
    stalled = job.condition("Stalled")
    assert stalled is None or stalled["status"] == "False", stalled
    assert job.status.get("enqueued") == 1


async def test_an_empty_archive_source_fails_its_task(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    source = {"archive_source": {"directory": str(tmp_path / "team-a" / "nothing-here") + "/"}}
    _job, records = await run_job(
        redis_client, {"archiveSource": {"job": "nothing-here"}, "extract": EXTRACT}, source, [REEXTRACT_URL]
    )
    assert records == []
