"""CronScrapeJob scheduling follows the CronJob controller's contract."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trawl.operator.cron.schedule import decide, history_to_delete, job_name, next_time, schedule_times

T0 = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def _decide(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = dict(
        schedule="*/5 * * * *",
        time_zone=None,
        now=T0,
        created=T0 - timedelta(minutes=1),
        last_schedule=None,
        starting_deadline_seconds=None,
        concurrency_policy="Allow",
        suspend=False,
        active_jobs=[],
    )
    args.update(kw)
    return decide(**args)  # type: ignore[arg-type]


def test_due_time_creates_a_job() -> None:
    d = _decide()
    assert d.create_for == T0
    assert d.missed == 0
    assert d.next_time == T0 + timedelta(minutes=5)


def test_nothing_due_before_first_time() -> None:
    d = _decide(now=T0 + timedelta(minutes=2), last_schedule=T0)
    assert d.create_for is None
    assert d.skipped_reason is None


def test_outage_runs_only_the_latest_missed_time() -> None:
    d = _decide(now=T0 + timedelta(minutes=31), last_schedule=T0)
    assert d.create_for == T0 + timedelta(minutes=30)
    assert d.missed == 5


def test_starting_deadline_skips_a_late_start() -> None:
    d = _decide(now=T0 + timedelta(minutes=3), last_schedule=T0 - timedelta(minutes=5), starting_deadline_seconds=60)
    assert d.create_for is None


def test_starting_deadline_allows_a_timely_start() -> None:
    d = _decide(now=T0 + timedelta(seconds=30), last_schedule=T0 - timedelta(minutes=5), starting_deadline_seconds=60)
    assert d.create_for == T0


def test_forbid_skips_while_a_job_is_active() -> None:
    d = _decide(concurrency_policy="Forbid", active_jobs=["a"])
    assert d.create_for is None
    assert d.skipped_reason == "ConcurrencyForbidden"


def test_replace_deletes_active_jobs_first() -> None:
    d = _decide(concurrency_policy="Replace", active_jobs=["a", "b"])
    assert d.create_for == T0
    assert d.delete_active == ["a", "b"]


def test_allow_runs_concurrently() -> None:
    d = _decide(concurrency_policy="Allow", active_jobs=["a"])
    assert d.create_for == T0
    assert d.delete_active == []


def test_suspend_creates_nothing() -> None:
    d = _decide(suspend=True)
    assert d.create_for is None
    assert d.skipped_reason == "Suspended"


def test_time_zone_is_honoured() -> None:
    # 09:00 in Paris is 08:00 UTC in winter.
    after = datetime(2026, 11, 25, 0, 0, tzinfo=UTC)
    assert next_time("0 9 * * *", "Europe/Paris", after) == datetime(2026, 11, 25, 8, 0, tzinfo=UTC)


def test_job_name_is_minutes_since_epoch() -> None:
    assert job_name("nightly", T0) == f"nightly-{int(T0.timestamp() // 60)}"


@pytest.mark.parametrize(
    ("keep_ok", "keep_failed", "expected"),
    [(1, 1, ["ok1", "bad1"]), (0, 0, ["ok1", "ok2", "bad1", "bad2"]), (5, 5, [])],
)
def test_history_limits_delete_oldest(keep_ok: int, keep_failed: int, expected: list[str]) -> None:
    finished = [
        ("ok2", T0 + timedelta(minutes=2), True),
        ("ok1", T0 + timedelta(minutes=1), True),
        ("bad1", T0 + timedelta(minutes=1), False),
        ("bad2", T0 + timedelta(minutes=3), False),
    ]
    assert history_to_delete(finished, keep_ok, keep_failed) == expected


# ------------------------------------------------------------------ issue 32: what a tenant's schedule can cost


def _old_schedule_times(schedule: str, time_zone: str | None, after: datetime, until: datetime, limit: int):  # type: ignore[no-untyped-def]
    """The walk forward from ``after`` that schedule_times replaced: every time up to ``until``."""
    from zoneinfo import ZoneInfo

    from croniter import croniter

    it = croniter(schedule, after.astimezone(ZoneInfo(time_zone or "UTC")))
    times: list[datetime] = []
    while True:
        t = it.get_next(datetime)
        if t > until:
            return times
        times.append(t.astimezone(UTC))
        if len(times) > limit:
            times.pop(0)


def test_catch_up_walks_back_from_now_and_finds_what_the_walk_forward_found() -> None:
    """Where the walk forward was bounded (at most a few hundred steps), walking back gives the same times,
    so every decision is unchanged; time zones with daylight saving included (the 2026 changes in Paris
    and New York fall inside the spans)."""
    import random

    rng = random.Random(32)
    schedules = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * mon-fri", "15,45 1-3 * * *", "* * * * *", "@daily"]
    spans = [
        (datetime(2026, 3, 29, 0, 0, tzinfo=UTC), "Europe/Paris"),
        (datetime(2026, 10, 25, 0, 0, tzinfo=UTC), "Europe/Paris"),
        (datetime(2026, 11, 1, 4, 0, tzinfo=UTC), "America/New_York"),
        (T0, None),
    ]
    for _ in range(300):
        schedule = rng.choice(schedules)
        base, zone = rng.choice(spans)
        after = base + timedelta(minutes=rng.randint(-180, 180), seconds=rng.choice([0, 0, 17]))
        until = after + timedelta(minutes=rng.randint(0, 600), seconds=rng.choice([0, 0, 42]))
        for limit in (1, 5, 100):
            expected = _old_schedule_times(schedule, zone, after, until, limit)
            assert schedule_times(schedule, zone, after, until, limit) == expected, (schedule, zone, after, until)


def test_a_creation_years_ago_decides_in_milliseconds() -> None:
    """`* * * * *` created five years ago and never run: 2.6 million missed minutes. The walk forward spent
    most of a minute of the operator's event loop on them at every pass; walking back stops at the 100
    counted."""
    import time

    started = time.thread_time()
    d = _decide(schedule="* * * * *", created=T0 - timedelta(days=5 * 365))
    spent = time.thread_time() - started
    assert d.create_for == T0
    assert d.missed == 99  # as before: 100 counted, the latest is the one started
    assert spent < 1.0, f"{spent:.2f} s of CPU to decide"


@pytest.mark.parametrize("schedule", ["30-10 * * * *", "0 22-2 * * *", "0 9 * * fri-mon", "0 0 * dec-feb *"])
def test_a_range_that_runs_backwards_is_refused_as_a_cronjob_refuses_it(schedule: str) -> None:
    """croniter reads 30-10 as a wrap-around (30-59 and 0-10); Kubernetes' CronJob refuses it ("beginning of
    range beyond end of range"), so the CronScrapeJob is refused too, naming the range."""
    from pydantic import ValidationError

    from trawl.api.cronscrapejob import CronScrapeJobSpec

    with pytest.raises(ValidationError, match="runs backwards"):
        CronScrapeJobSpec.model_validate(
            {"schedule": schedule, "jobTemplate": {"spec": {"pool": "p", "urls": ["https://a.example/"]}}}
        )


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("5-5 * * * *", T0 + timedelta(minutes=5)),
        ("5-5/2 * * * *", T0 + timedelta(minutes=5)),
        ("0 15-15 * * *", T0 + timedelta(hours=3)),
        ("0 0 * * fri-fri", datetime(2026, 11, 27, 0, 0, tzinfo=UTC)),
    ],
)
def test_a_range_of_one_value_is_that_value(schedule: str, expected: datetime) -> None:
    """A CronJob reads 5-5 as minute 5; croniter reads it as * (every minute), so it is given the value."""
    assert next_time(schedule, None, T0) == expected


def test_sitemaps_since_the_last_successful_run() -> None:
    """A template with sitemaps.lastmodSinceLastRun gets lastmodAfter at the start of the cron's latest
    successful run (its first job takes every URL; a later lastmodAfter of its own wins)."""
    from trawl.api.cronscrapejob import CronScrapeJobSpec
    from trawl.operator.cron.reconcile import build_job, last_successful_start

    def cron(sitemaps: dict[str, object]) -> CronScrapeJobSpec:
        template = {"spec": {"pool": "p", "sitemaps": {"urls": ["https://shop.test/sitemap.xml"], **sitemaps}}}
        return CronScrapeJobSpec.model_validate({"schedule": "0 * * * *", "jobTemplate": template})

    jobs = [
        {
            "name": "a",
            "phase": "Succeeded",
            "startTime": "2026-11-25T09:00:05Z",
            "completionTime": "2026-11-25T09:10:00Z",
        },
        {
            "name": "b",
            "phase": "Succeeded",
            "startTime": "2026-11-25T10:00:07Z",
            "completionTime": "2026-11-25T10:09:00Z",
        },
        {"name": "c", "phase": "Failed", "startTime": "2026-11-25T11:00:02Z", "completionTime": "2026-11-25T11:01:00Z"},
        {"name": "d", "phase": "Running", "startTime": "2026-11-25T12:00:01Z"},
    ]
    last = last_successful_start(jobs)
    assert last == datetime(2026, 11, 25, 10, 0, 7, tzinfo=UTC), "the latest success's start, not a failure's"
    assert last_successful_start([jobs[2], jobs[3]]) is None
    since = build_job("c", "uid", cron({"lastmodSinceLastRun": True}), T0, last)
    assert since["spec"]["sitemaps"]["lastmodAfter"] == "2026-11-25T10:00:07Z"
    first = build_job("c", "uid", cron({"lastmodSinceLastRun": True}), T0, None)
    assert "lastmodAfter" not in first["spec"]["sitemaps"], "the first run takes every URL"
    own = build_job("c", "uid", cron({"lastmodSinceLastRun": True, "lastmodAfter": "2026-11-25T11:00:00Z"}), T0, last)
    assert own["spec"]["sitemaps"]["lastmodAfter"] == "2026-11-25T11:00:00Z", "a later date of its own wins"
    off = build_job("c", "uid", cron({}), T0, last)
    assert "lastmodAfter" not in off["spec"]["sitemaps"]
