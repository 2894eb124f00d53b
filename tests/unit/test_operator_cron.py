"""CronScrapeJob scheduling follows the CronJob controller's contract."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trawl.operator.cron.schedule import decide, history_to_delete, job_name, next_time

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
