"""Redis's clock on the worker's, and how late a strictly spaced request may leave (pure arithmetic)."""

from __future__ import annotations

import pytest

from trawl.worker.politeness.lateness import LATE_SHARE, MAX_MARGIN, OFFSET_WINDOW, Lag, RedisClock, too_late
from trawl.worker.politeness.rate import RATE_SAFETY, interval_us

pytestmark = pytest.mark.unit

REDIS_AT_ZERO = 1_800_000_000_000_000  # Redis's clock (us) when the worker's monotonic clock reads 0


def test_the_offset_is_the_least_sample_so_a_reply_read_late_does_not_move_it() -> None:
    clock = RedisClock()
    clock.observe(REDIS_AT_ZERO + 1_000_000, 1.001)  # read 1 ms after Redis's TIME
    clock.observe(REDIS_AT_ZERO + 2_000_000, 2.300)  # sat unread 0.3 s (a busy loop)
    assert clock.local(REDIS_AT_ZERO + 5_000_000) == pytest.approx(5.001, abs=1e-6)
    clock.observe(REDIS_AT_ZERO + 3_000_000, 3.0002)  # a faster reply: the better estimate
    assert clock.local(REDIS_AT_ZERO + 5_000_000) == pytest.approx(5.0002, abs=1e-6)


def test_a_due_time_read_late_is_still_seen_late() -> None:
    """The token was due at Redis's 10 s; its reply was read at 10.25 s and the request leaves then: too late,
    though ``monotonic() + wait`` at the read would say it is on time."""
    clock = RedisClock()
    clock.observe(REDIS_AT_ZERO + 1_000_000, 1.001)
    due = clock.local(REDIS_AT_ZERO + 10_000_000)
    assert too_late(10.25 - due, 0.5)
    assert not too_late(0.5 * LATE_SHARE * 0.9, 0.5)


def test_the_offset_follows_a_clock_that_moved_within_two_windows() -> None:
    """A Redis restarted on (or failed over to) a host whose clock is 2 s behind: its replies look 2 s later
    on the old offset; the old least sample ages out within two windows."""
    clock = RedisClock()
    clock.observe(REDIS_AT_ZERO + 1_000_000, 1.001)
    t = 1.5
    while t < 1 + 2 * OFFSET_WINDOW + 1:
        clock.observe(REDIS_AT_ZERO - 2_000_000 + int(t * 1_000_000), t + 0.001)
        t += 0.5
    assert clock.local(REDIS_AT_ZERO + 30_000_000) == pytest.approx(32.001, abs=1e-6)


def test_a_window_with_no_reply_before_it_starts_afresh() -> None:
    clock = RedisClock()
    clock.observe(REDIS_AT_ZERO + 1_000_000, 1.001)
    clock.observe(REDIS_AT_ZERO + 100_000_000, 100.005)  # after a long silence: the old sample is forgotten
    assert clock.local(REDIS_AT_ZERO + 101_000_000) == pytest.approx(101.005, abs=1e-6)


@pytest.mark.parametrize("rate", [0.5, 2.0, 10.0, 39.0])
def test_two_requests_each_late_within_the_tolerance_stay_under_the_rate(rate: float) -> None:
    """Redis's due times are an interval apart; the first leaves as late as allowed, the second on time."""
    interval = interval_us(rate) / 1_000_000
    assert RATE_SAFETY < 1
    first_leaves = 0.0 + interval * LATE_SHARE
    assert not too_late(first_leaves, interval)
    assert interval - first_leaves >= 1 / rate
    assert too_late(interval * LATE_SHARE * 1.01, interval)


def test_the_lag_rises_at_once_and_falls_slowly_and_the_margin_is_bounded() -> None:
    lag = Lag()
    assert lag.margin_us(0.5) == 0  # an idle worker's tokens reserve nothing
    lag.seen(0.04)
    assert lag.margin_us(0.5) == 40_000
    lag.seen(0.0)
    assert 0 < lag.margin_us(0.5) < 40_000
    for _ in range(200):
        lag.seen(-0.001)  # on time (a sleep ends a little early on the loop's clock)
    assert lag.margin_us(0.5) == 0
    lag.seen(3.0)  # a stalled loop: at most MAX_MARGIN of an interval is reserved
    assert lag.margin_us(0.5) == int(0.5 * MAX_MARGIN * 1_000_000)
