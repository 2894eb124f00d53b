"""Refresh jobs (spec.refresh) through the real worker, queue and Redis against a real loopback site whose
pages change between two runs of one lineage: validators are sent and honoured (304: no body, nothing
extracted), a site that ignores them is fingerprinted instead, a timestamp outside the extracted fields is no
change, a page that answers 404 is gone, and the labels, the records and the job's counts agree with the
site's own ground truth. Also: a run on two other workers labels exactly as one (fingerprints are the same in
any worker), and a page's label is counted once however often its state is saved (a redelivered task).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.pagestate import PageSave, PageStates
from trawl.refresh.state import Change, decode, encode, encoded_prefix, job_tag, url_field
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/refresh}"
LINEAGE = "team-a/shop"
KINDS = ("etag", "lastmod", "plain", "noise")  # validators: ETag; Last-Modified only; none; none (noisy)
PER_KIND = 6


@dataclass
class Site:
    """Pages whose versions the test sets; the site's own log of what each request sent and got."""

    version: dict[str, int] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    broken: set[str] = field(default_factory=set)  # answer 500
    log: list[tuple[str, int, bool]] = field(default_factory=list)  # (path, status, validators sent)
    stamp: int = 0
    url: str = ""

    def paths(self) -> list[str]:
        return [f"/{kind}/{i}" for kind in KINDS for i in range(PER_KIND)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        kind = path.split("/")[1]
        sent = "If-None-Match" in request.headers or "If-Modified-Since" in request.headers
        if path in self.broken:
            self.log.append((path, 500, sent))
            return web.Response(status=500, text="broken")
        if path in self.gone:
            self.log.append((path, 404, sent))
            return web.Response(status=404, text="gone")
        v = self.version.get(path, 1)
        etag = f'"{path}-{v}"'
        modified = f"Tue, 2{v % 8} Oct 2026 10:00:00 GMT"
        if kind == "etag" and request.headers.get("If-None-Match") == etag:
            self.log.append((path, 304, sent))
            return web.Response(status=304, headers={"ETag": etag})
        if kind == "lastmod" and request.headers.get("If-Modified-Since") == modified:
            self.log.append((path, 304, sent))
            return web.Response(status=304)
        self.stamp += 1
        headers = {"ETag": etag} if kind == "etag" else {"Last-Modified": modified} if kind == "lastmod" else {}
        body = (
            f"<html><head><title>{path}</title></head><body><p class=price>{path} v{v}</p>"
            f"<footer>generated at request {self.stamp}</footer></body></html>"
        )
        self.log.append((path, 200, sent))
        return web.Response(text=body, content_type="text/html", headers=headers)


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = Site()
    app = web.Application()
    app.router.add_get("/{tail:.*}", s.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    s.url = f"http://127.0.0.1:{port}"
    try:
        yield s
    finally:
        await runner.cleanup()


async def _run(
    redis: aioredis.Redis,
    site: Site,
    workers: int = 1,
    paths: list[str] | None = None,
    sweep: bool = False,
    **refresh: Any,
) -> tuple[str, dict[str, Any]]:
    """One refresh run of the lineage over every page (or ``paths``), to its end; its job id and records by
    path. ``sweep``: then, as the operator does, the job's sweep (pages the run never reached are gone)."""
    spec = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": [site.url + p for p in (site.paths() if paths is None else paths)],
            "extract": {"fields": [{"name": "price", "selector": ".price"}], "title": False},
            "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8, "respectRobotsTxt": False},
            "refresh": {"lineage": "shop", **refresh},
            "maxDeadLetters": 100,
            "retry": {"maxAttempts": 2, "initialDelaySeconds": 0.1},
        }
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, spec, None, LINEAGE))
    await queue.enqueue(job_id, spec.seed_urls())
    await queue.mark_enqueue_done(job_id)
    running = []
    for n in range(workers):
        config = WorkerConfig(prefix=PREFIX, worker_id=f"w{n}-{job_id}", concurrency=4, allowed_cidrs=["127.0.0.1/32"])
        worker = Worker(config, queue, redis, Keys(PREFIX))
        running.append((worker, asyncio.create_task(worker.run())))

    async def finished() -> bool:
        return (await queue.job_stats(job_id)).finished

    try:
        await wait_for_async(
            "the run to finish", finished, 60, 0.05, diag=lambda: queue.job_stats(job_id), runner=running[0][1]
        )
        if sweep:
            assert await queue.enqueue_sweep(job_id) == 1
            assert await queue.enqueue_sweep(job_id) == 0, "once per job"
            await wait_for_async(
                "the sweep to finish", finished, 60, 0.05, diag=lambda: queue.job_stats(job_id), runner=running[0][1]
            )
    finally:
        for worker, _task in running:
            worker.request_stop()
        await asyncio.wait_for(asyncio.gather(*(t for _w, t in running)), 30)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    records = [json.loads(fields[b"data"]) for _id, fields in entries]
    return job_id, {r["url"].removeprefix(site.url): r for r in records}


async def test_second_run_labels_what_changed(redis_client: aioredis.Redis, site: Site) -> None:
    await redis_client.flushall()
    queue = Queue(redis_client, PREFIX)
    first_job, first = await _run(redis_client, site)
    assert set(first) == set(site.paths()) and {r["change"] for r in first.values()} == {"new"}
    assert (await queue.job_stats(first_job)).changes == (len(site.paths()), 0, 0, 0)
    assert not any(sent for _p, _s, sent in site.log), "nothing known yet: no validators"

    # Between the runs: one page of each kind changes; noise pages change only their timestamp (every
    # request does); one page with validators goes away.
    truth_changed = {f"/{kind}/1" for kind in KINDS if kind != "noise"}
    for path in truth_changed:
        site.version[path] = 2
    site.gone.add("/etag/5")
    site.log.clear()

    second_job, second = await _run(redis_client, site, workers=2)
    labels = {path: r["change"] for path, r in second.items()}
    assert labels == {**dict.fromkeys(truth_changed, "changed"), "/etag/5": "gone"}, "only changes write records"
    assert second["/etag/1"]["price"] == "/etag/1 v2"
    stats = await queue.job_stats(second_job)
    unchanged = len(site.paths()) - len(truth_changed) - 1
    assert stats.changes == (0, len(truth_changed), unchanged, 1)
    assert stats.dead == 0, "a page the lineage had seen that now answers 404 is gone, not a failure"

    by_path = {path: (status, sent) for path, status, sent in site.log}
    for kind, honours in (("etag", True), ("lastmod", True), ("plain", False), ("noise", False)):
        for i in (0, 2, 3, 4):
            status, sent = by_path[f"/{kind}/{i}"]
            assert sent == honours, f"/{kind}/{i}: validators are sent exactly when the last run got some"
            assert status == (304 if honours else 200), f"/{kind}/{i}"
    assert by_path["/etag/1"] == (200, True), "a changed page's validators no longer match"


async def test_records_all_and_force_refresh(redis_client: aioredis.Redis, site: Site) -> None:
    await redis_client.flushall()
    await _run(redis_client, site)
    site.log.clear()
    _job, records = await _run(redis_client, site, records="All", forceRefresh=True)
    assert set(records) == set(site.paths()) and {r["change"] for r in records.values()} == {"unchanged"}
    assert not any(sent for _p, _s, sent in site.log) and {s for _p, s, _ in site.log} == {200}
    assert all(r["price"] for r in records.values()), "fetched in full: the fields are there"


async def test_a_page_is_counted_once_however_often_its_state_is_saved(redis_client: aioredis.Redis) -> None:
    """A task redelivered after its save (its ack lost) saves again: the label is counted once per job."""
    await redis_client.flushall()
    keys = Keys(PREFIX)
    pages = PageStates(redis_client, keys)
    await redis_client.hset(keys.job("j1"), mapping={"tot": 1})
    tag = job_tag("j1")
    value = f"1\n{tag}\nchanged\n0123456789abcdef\n\n\n1\n1"
    for _ in range(3):
        assert await pages.save("j1", LINEAGE, encoded_prefix(tag), [PageSave("f1", value, "changed")], 60) == 1
    assert await redis_client.hget(keys.job("j1"), "rc") == b"1"
    assert 0 < await redis_client.ttl(keys.page_state(LINEAGE)) <= 60
    # a job that is gone (cancelled, expired) writes no state and counts nothing
    assert await pages.save("gone", LINEAGE, encoded_prefix(job_tag("gone")), [PageSave("f2", value, "new")], 60) == 0
    assert await redis_client.hexists(keys.page_state(LINEAGE), "f2") == 0


async def test_pages_a_run_no_longer_reaches_are_gone_once_then_forgotten(
    redis_client: aioredis.Redis, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep after a run: a page of the last run that this run's list no longer holds is gone (a record,
    counted once); a page that failed for good in this run is not; in small steps (a sweep task per 5 pages
    of the lineage) nothing is reported twice or missed; a page gone in the last run and still absent is
    forgotten (not reported again), and comes back as new."""
    import trawl.worker.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "MAX_PAGES_PER_TASK", 5)
    monkeypatch.setattr(sweep_module, "SCAN_COUNT", 2)
    await redis_client.flushall()
    queue = Queue(redis_client, PREFIX)
    keys = Keys(PREFIX)
    every = site.paths()
    await _run(redis_client, site, sweep=True)
    dropped = ["/plain/5", "/etag/4"]
    kept = [p for p in every if p not in dropped]

    job2, records = await _run(redis_client, site, paths=kept, sweep=True)
    gone = {path: r for path, r in records.items() if r["change"] == "gone"}
    assert set(gone) == set(dropped), records
    assert all(r["status"] is None and r["reached"] is False for r in gone.values())
    stats = await queue.job_stats(job2)
    assert stats.changes == (0, 0, len(kept), len(dropped))
    assert stats.total - len(kept) >= len(every) // 5, "swept in steps of 5 pages, each a task"
    assert await redis_client.hlen(keys.page_state(LINEAGE)) == len(every), "gone pages keep a state for a run"

    job3, records = await _run(redis_client, site, paths=kept, sweep=True)
    assert records == {}, "gone once: not again"
    assert (await queue.job_stats(job3)).changes == (0, 0, len(kept), 0)
    assert await redis_client.hlen(keys.page_state(LINEAGE)) == len(kept), "then forgotten"

    _job4, records = await _run(redis_client, site, sweep=True)
    assert {path: r["change"] for path, r in records.items()} == dict.fromkeys(dropped, "new")


async def test_a_page_that_failed_in_the_run_is_not_gone(redis_client: aioredis.Redis, site: Site) -> None:
    await redis_client.flushall()
    queue = Queue(redis_client, PREFIX)
    await _run(redis_client, site, sweep=True)
    site.broken.add("/plain/2")
    job_id, records = await _run(redis_client, site, sweep=True)
    assert records == {}, records
    stats = await queue.job_stats(job_id)
    assert stats.dead == 1 and stats.changes == (0, 0, len(site.paths()) - 1, 0)


async def test_no_sweep_for_a_run_its_task_cap_stopped(redis_client: aioredis.Redis) -> None:
    """Pages past the cap were never tried: not gone. Nor under cross-job dedupe (a page another job
    fetched was not reached by this one, yet is not gone)."""
    await redis_client.flushall()
    queue = Queue(redis_client, PREFIX)
    for name, config in (("capped", {"max_pages": 2}), ("deduped", {"dedupe_across_jobs": True})):
        spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]})
        job = build_job_config(name, spec, None, LINEAGE)
        await queue.register_job(replace(job, **config))
        await queue.enqueue(name, spec.seed_urls())
        await queue.mark_enqueue_done(name)
    assert await queue.enqueue_sweep("capped") == -2
    assert await queue.enqueue_sweep("deduped") == -3
    assert await queue.enqueue_sweep("capped") == 0, "decided once"
    assert await queue.enqueue_sweep("no-such-job") == -1


async def test_adaptive_revisits_leave_stable_pages_alone_and_count_the_fetches_saved(
    redis_client: aioredis.Redis, site: Site
) -> None:
    """Pages unchanged for 10 hours at a visit an hour ago are fresh for 5 more (revisit.maxHours 24): the
    next run sends them no request, labels them unchanged (not revisited), counts them apart and keeps them
    from the sweep; pages changed at their last visit are fetched (conditionally) as before."""
    await redis_client.flushall()
    queue = Queue(redis_client, PREFIX)
    keys = Keys(PREFIX)
    await _run(redis_client, site, sweep=True)
    now = int(time.time())
    stable = [p for p in site.paths() if p.endswith(("/0", "/1", "/2"))]
    for path in stable:  # as if fetched an hour ago, unchanged for the 10 hours before
        key = url_field(site.url + path)
        state = decode(await redis_client.hget(keys.page_state(LINEAGE), key))
        assert state is not None
        old = state._replace(change=Change.UNCHANGED, fetched_at=now - 3600, changed_at=now - 11 * 3600)
        await redis_client.hset(keys.page_state(LINEAGE), key, encode(old))
    site.log.clear()

    job_id, records = await _run(redis_client, site, sweep=True, revisit={"maxHours": 24}, records="All")
    requested = {path for path, _status, _sent in site.log}
    assert requested == set(site.paths()) - set(stable), "no request for a page not due"
    assert {p: (r["change"], r.get("revisited", True)) for p, r in records.items() if p in stable} == dict.fromkeys(
        stable, ("unchanged", False)
    )
    stats = await queue.job_stats(job_id)
    assert stats.not_revisited == len(stable) and stats.changes[3] == 0, "counted apart; not gone"
    assert stats.changes[2] == len(site.paths()) - len(stable)


async def test_a_changed_pages_record_names_the_fields_that_changed(redis_client: aioredis.Redis, site: Site) -> None:
    await redis_client.flushall()
    await _run(redis_client, site, changedFields=True)
    site.version["/plain/1"] = 2
    _job, records = await _run(redis_client, site, changedFields=True)
    assert {p: (r["change"], r.get("changedFields")) for p, r in records.items()} == {
        "/plain/1": ("changed", ["price"])
    }
