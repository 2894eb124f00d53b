"""Sessions on real workers, a real Redis and a real site that bans per identity (trawl.dev.banfarm): a
session's cookie follows it across two workers, a cookie never crosses to another host, a banned identity is
retired and the page tried on another, blocks are counted apart and trip the breaker with reason Blocked,
and through a real proxy with credentials, none of them reaches a log or Redis."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from trawl.api.proxies import ProxyStatus
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev.banfarm import BanFarm
from trawl.dev.proxy_servers import TinyProxy
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.notes import JobNotes
from trawl.queue.proxyusage import summary as proxy_summary
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async
from worker_runs import run_to_end

PREFIX = "trawl:{test/sessions}"
PASSWORD = "s3ssion-Proxy-pw"
ALLOWED = ["127.0.0.2/31"]  # the farms on 127.0.0.2 and 127.0.0.3; the proxies on 127.0.0.1 stay blocked


@pytest.fixture
async def farm() -> AsyncIterator[BanFarm]:
    async with BanFarm(host="127.0.0.2", ban_after=1000) as site:
        yield site


async def _register(redis: Any, job: dict[str, Any], pool: dict[str, Any] | None = None) -> tuple[Queue, str]:
    spec = ScrapeJobSpec.model_validate({"pool": "p", "politeness": {"requestsPerSecond": 1000}, **job})
    pool_spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://unused"}, **(pool or {})})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, spec, pool_spec))
    await queue.enqueue(job_id, spec.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return queue, job_id


def _worker(redis: Any, queue: Queue, name: str, **config: Any) -> Worker:
    settings = WorkerConfig(prefix=PREFIX, worker_id=name, allowed_cidrs=ALLOWED, **{"concurrency": 2, **config})
    return Worker(settings, queue, redis, Keys(PREFIX))


async def _finish(queue: Queue, job_id: str, *runners: asyncio.Task[None]) -> None:
    async def finished() -> bool:
        return (await queue.job_stats(job_id)).finished

    await wait_for_async("the job to finish", finished, 60, 0.05, diag=lambda: queue.job_stats(job_id))


async def _stop(*pairs: tuple[Worker, asyncio.Task[None]]) -> None:
    for worker, _ in pairs:
        worker.request_stop()
    for _, runner in pairs:
        await asyncio.wait_for(runner, 30)


async def test_a_session_sticks_across_two_workers(redis_client: Any, farm: BanFarm) -> None:
    job = {
        "urls": [farm.page_url(i) for i in range(20)],
        "session": {"poolSize": 1},
        "politeness": {"requestsPerSecond": 20},
    }
    queue, job_id = await _register(redis_client, job)
    first = _worker(redis_client, queue, "w-first", concurrency=1)
    first_run = asyncio.create_task(first.run())
    running = [(first, first_run)]
    try:
        await wait_for_async("the first page", lambda: _true(len(farm.visits) >= 2), 30, 0.02)
        second = _worker(redis_client, queue, "w-second", concurrency=1)
        running.append((second, asyncio.create_task(second.run())))
        await _finish(queue, job_id)
    finally:
        await _stop(*running)
    stats = await queue.job_stats(job_id)
    assert stats.succeeded == 20, stats
    assert farm.visits[0].sid is None  # the first request had no cookie; the farm set one
    sids = {v.sid for v in farm.visits[1:]}
    assert len(sids) == 1 and None not in sids, farm.visits  # every later request, on either worker, carried it
    assert first.processed > 0 and running[1][0].processed > 0, (first.processed, running[1][0].processed)


async def test_each_session_keeps_the_user_agent_it_picked_for_its_life(redis_client: Any, farm: BanFarm) -> None:
    agents = ["TrawlTest/1 (first)", "TrawlTest/2 (second)"]
    job = {"urls": [farm.page_url(i) for i in range(24)], "session": {"poolSize": 4, "userAgents": agents}}
    queue, job_id = await _register(redis_client, job)
    worker = _worker(redis_client, queue, "w-agents", concurrency=2)
    await run_to_end(worker, queue, job_id, 60, 30)
    assert (await queue.job_stats(job_id)).succeeded == 24
    assert {v.user_agent for v in farm.visits} <= set(agents), farm.visits  # never the job's default
    by_session: dict[str, set[str]] = {}
    for visit in farm.visits:
        if visit.sid:
            by_session.setdefault(visit.sid, set()).add(visit.user_agent)
    assert by_session and all(len(uas) == 1 for uas in by_session.values()), by_session  # one agent a session


async def _true(value: bool) -> bool:
    return value


async def test_a_cookie_never_crosses_to_another_host(redis_client: Any) -> None:
    async with (
        BanFarm(host="127.0.0.2", ban_after=1000, set_cookies=("a_only=1; Path=/", "stolen=1; Domain=127.0.0.3")) as a,
        BanFarm(host="127.0.0.3", ban_after=1000) as b,
    ):
        urls = [u for i in range(6) for u in (a.page_url(i), b.page_url(i))]
        queue, job_id = await _register(redis_client, {"urls": urls, "session": {"poolSize": 1}})
        worker = _worker(redis_client, queue, "w-scope", concurrency=1)
        await run_to_end(worker, queue, job_id, 60, 30)
        assert (await queue.job_stats(job_id)).succeeded == 12
    a_sids = {v.sid for v in a.visits if v.sid}
    b_sids = {v.sid for v in b.visits if v.sid}
    assert len(a_sids) == 1 and len(b_sids) == 1 and a_sids.isdisjoint(b_sids)  # one session, a cookie per host
    assert all("a_only" in v.cookie for v in a.visits[1:])
    assert not any("a_only" in v.cookie or "stolen" in v.cookie for v in b.visits), b.visits
    assert not any(sid in v.cookie for v in b.visits for sid in a_sids)


async def test_a_banned_identity_is_retired_and_the_page_tried_on_another(redis_client: Any) -> None:
    async with BanFarm(host="127.0.0.2", ban_after=3) as site:
        job = {"urls": [site.page_url(i) for i in range(12)], "session": {"poolSize": 1}, "retry": {"maxAttempts": 1}}
        queue, job_id = await _register(redis_client, job)
        worker = _worker(redis_client, queue, "w-ban", concurrency=1)
        await run_to_end(worker, queue, job_id, 60, 30)
        stats = await queue.job_stats(job_id)
        assert stats.succeeded == 12 and stats.dead == 0, stats  # no attempt spent on a block
        banned = [v for v in site.visits if v.banned]
        assert banned and all(v.answer == 403 for v in banned)
        for visit in banned:  # a banned cookie is never sent again after its ban
            later = site.visits[site.visits.index(visit) + 1 :]
            assert not any(v.sid == visit.sid for v in later), (visit, later)
        assert len({v.sid for v in site.visits if v.sid}) >= 3  # 12 pages, 4 per identity (1 + 3 with its cookie)
    blocked, domains = await JobNotes(redis_client, Keys(PREFIX).job).blocked_counts(job_id)
    assert blocked == len(banned) and domains == [(f"127.0.0.2:{site.port}", blocked)]
    registry = worker.metrics.registry
    assert registry.get_sample_value("trawl_worker_blocked_total") == blocked
    assert registry.get_sample_value("trawl_worker_rate_limit_deferrals_total", {"reason": "blocked"}) == blocked


async def test_a_site_that_blocks_every_identity_opens_the_breaker_with_reason_blocked(redis_client: Any) -> None:
    async with BanFarm(host="127.0.0.2", always=True, soft=True) as site:
        job = {
            "urls": [site.page_url(i) for i in range(4)],
            "session": {"poolSize": 2, "block": {"markers": ["solve the captcha"]}, "maxBlockedRetries": 10},
        }
        queue, job_id = await _register(redis_client, job)
        worker = _worker(redis_client, queue, "w-wall", concurrency=1, breaker_failures=3, breaker_open_seconds=60)
        runner = asyncio.create_task(worker.run())
        notes = JobNotes(redis_client, Keys(PREFIX).job)
        try:

            async def throttled() -> bool:
                return bool(await notes.throttled_domains(job_id))

            await wait_for_async("the breaker to open", throttled, 30, 0.05)
        finally:
            await _stop((worker, runner))
        (domain,) = await notes.throttled_domains(job_id)
        assert domain.domain == f"127.0.0.2:{site.port}" and domain.reason.startswith("Blocked: "), domain
        assert len(site.visits) == 3  # the breaker stopped the requests at its threshold
        assert len({v.sid for v in site.visits}) == 1 and site.visits[0].sid is None  # a new identity each time
        blocked, _ = await notes.blocked_counts(job_id)
        assert blocked == 3
        assert (await queue.job_stats(job_id)).dead == 0  # held back, not failed


async def test_sessions_through_a_proxy_keep_its_credentials_out_of_logs_and_redis(
    redis_client: Any, farm: BanFarm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    farm.ban_after = 3  # 4 pages an identity (its first without the cookie), 3 new identities a proxy
    with (
        TinyProxy(username="scraper", password=PASSWORD, add_headers=(("X-Proxy", "first"),)) as first,
        TinyProxy(username="scraper", password=PASSWORD, add_headers=(("X-Proxy", "second"),)) as second,
    ):
        (tmp_path / "proxies").mkdir()
        (tmp_path / "proxies" / "urls").write_text(
            f"{first.url('scraper', PASSWORD)}\n{second.url('scraper', PASSWORD)}\n"
        )
        monkeypatch.setenv("TRAWL_SECRETS_DIR", str(tmp_path))
        pool = {
            "worker": {"secrets": ["proxies"]},
            "proxies": {"groups": [{"name": "dc", "secretRef": {"name": "proxies", "key": "urls"}, "default": True}]},
        }
        # Two sessions take at most 4 pages each before a ban (a cookieless first, then 3): 12 pages make one.
        job = {"urls": [farm.page_url(i) for i in range(12)], "session": {"poolSize": 2}}
        queue, job_id = await _register(redis_client, job, pool)
        worker = _worker(redis_client, queue, "w-proxy", concurrency=2)
        await run_to_end(worker, queue, job_id, 60, 30)
        assert (await queue.job_stats(job_id)).succeeded == 12
        dump = await _redis_text(redis_client)
        assert f"127.0.0.1:{first.port}" in dump or f"127.0.0.1:{second.port}" in dump  # sessions name their proxy
        rows = proxy_summary(await redis_client.hgetall(Keys(PREFIX).proxy_usage))  # the pool's status.proxies
        assert {r["proxy"] for r in rows} <= {f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"}
        assert sum(r["requests"] for r in rows) == len(farm.visits), (rows, farm.visits)
        assert sum(r["blocked"] for r in rows) == sum(v.banned for v in farm.visits) > 0
        assert all(r["group"] == "dc" and r["health"] in ("Healthy", "Blocked") for r in rows), rows
        ProxyStatus.model_validate(rows[0])
    assert any(v.banned for v in farm.visits)
    for sid in {v.sid for v in farm.visits if v.sid}:  # a session keeps its proxy: a cookie from one address
        assert len({v.proxy for v in farm.visits if v.sid == sid}) == 1, farm.visits
    assert PASSWORD not in caplog.text and "scraper:" not in caplog.text
    assert PASSWORD not in dump and "scraper:" not in dump


async def _redis_text(redis: Any) -> str:
    parts: list[str] = []
    async for key in redis.scan_iter(count=1000):
        kind = (await redis.type(key)).decode()
        reader = {
            "string": redis.get,
            "hash": redis.hgetall,
            "list": lambda k: redis.lrange(k, 0, -1),
            "set": redis.smembers,
            "zset": lambda k: redis.zrange(k, 0, -1, withscores=True),
            "stream": redis.xrange,
        }.get(kind)
        parts.append(f"{key!r} {kind} {await reader(key) if reader else ''!r}")
    return "\n".join(parts)


async def test_a_domain_rule_sends_one_host_through_a_proxy_group_and_the_other_direct(
    redis_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        BanFarm(host="127.0.0.2", ban_after=1000) as direct,
        BanFarm(host="127.0.0.3", ban_after=1000) as proxied,
    ):
        with TinyProxy(username="scraper", password=PASSWORD) as tiny:
            (tmp_path / "proxies").mkdir()
            (tmp_path / "proxies" / "urls").write_text(tiny.url("scraper", PASSWORD) + "\n")
            monkeypatch.setenv("TRAWL_SECRETS_DIR", str(tmp_path))
            pool = {
                "worker": {"secrets": ["proxies"]},
                "proxies": {"groups": [{"name": "resi", "secretRef": {"name": "proxies", "key": "urls"}}]},
            }
            rules = [{"host": "127.0.0.3", "proxyGroup": "resi"}]
            urls = [u for i in range(3) for u in (direct.page_url(i), proxied.page_url(i))]
            job = {"urls": urls, "politeness": {"requestsPerSecond": 1000, "domains": rules}}
            queue, job_id = await _register(redis_client, job, pool)
            worker = _worker(redis_client, queue, "w-rule")
            await run_to_end(worker, queue, job_id, 60, 30)
            assert (await queue.job_stats(job_id)).succeeded == 6
            through = [line for line in tiny.log().splitlines() if "Request (file descriptor" in line]
    assert len(through) == 3 and all("127.0.0.3" in line for line in through), through
    assert len(direct.visits) == 3 and len(proxied.visits) == 3


async def test_a_new_session_starts_with_the_pools_seed_cookies_each_on_its_own_host(
    redis_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with BanFarm(host="127.0.0.2", ban_after=1000) as a, BanFarm(host="127.0.0.3", ban_after=1000) as b:
        (tmp_path / "logins").mkdir()
        seed = f"{a.url}/ sid=seeded-a; Path=/\n{b.url}/ login=seeded-b; Path=/\n{a.url}/ stray=1; Domain=127.0.0.3\n"
        (tmp_path / "logins" / "shop").write_text(seed)
        monkeypatch.setenv("TRAWL_SECRETS_DIR", str(tmp_path))
        pool = {
            "worker": {"secrets": ["logins"]},
            "sessionSeeds": [{"name": "shop", "secretRef": {"name": "logins", "key": "shop"}}],
        }
        urls = [u for i in range(3) for u in (a.page_url(i), b.page_url(i))]
        queue, job_id = await _register(redis_client, {"urls": urls, "session": {"poolSize": 1, "seed": "shop"}}, pool)
        worker = _worker(redis_client, queue, "w-seed", concurrency=1)
        await run_to_end(worker, queue, job_id, 60, 30)
        assert (await queue.job_stats(job_id)).succeeded == 6
    assert all(v.sid == "seeded-a" for v in a.visits), a.visits  # the seeded identity from the first request
    assert all("login=seeded-b" in v.cookie for v in b.visits), b.visits
    assert not any("seeded-a" in v.cookie or "stray" in v.cookie for v in b.visits)
    assert not any("login=" in v.cookie for v in a.visits)
