"""Pure retry decisions of the queue: backoff delays, jitter, Retry-After, retry versus dead letter."""

from __future__ import annotations

import email.utils

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trawl.queue.backoff import RETRY_AFTER_CAP_SECONDS, backoff_delay, decide_failure, parse_retry_after
from trawl.queue.model import RetryPolicy


def no_jitter() -> float:
    return 0.0


def test_exponential_doubles_and_caps() -> None:
    p = RetryPolicy(backoff="Exponential", initial_delay=1.0, max_delay=10.0, jitter=0.0)
    assert [backoff_delay(p, a, no_jitter) for a in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_fixed_is_constant() -> None:
    p = RetryPolicy(backoff="Fixed", initial_delay=3.0, max_delay=10.0, jitter=0.0)
    assert {backoff_delay(p, a, no_jitter) for a in range(1, 10)} == {3.0}


def test_huge_attempt_does_not_overflow() -> None:
    p = RetryPolicy(initial_delay=1.0, max_delay=300.0, jitter=0.0)
    assert backoff_delay(p, 10_000, no_jitter) == 300.0


@given(attempt=st.integers(1, 50), r=st.floats(0.0, 1.0), jitter=st.floats(0.0, 1.0))
def test_jitter_only_shortens_within_fraction(attempt: int, r: float, jitter: float) -> None:
    p = RetryPolicy(initial_delay=0.5, max_delay=60.0, jitter=jitter)
    full = backoff_delay(RetryPolicy(initial_delay=0.5, max_delay=60.0, jitter=0.0), attempt, no_jitter)
    d = backoff_delay(p, attempt, lambda: r)
    assert full * (1 - jitter) - 1e-9 <= d <= full + 1e-9


def test_attempt_counts_from_one() -> None:
    with pytest.raises(ValueError):
        backoff_delay(RetryPolicy(), 0, no_jitter)


def test_permanent_failure_is_dead_at_once() -> None:
    d = decide_failure(RetryPolicy(max_attempts=5), 1, "HTTP4xx", no_jitter)
    assert (d.retry, d.reason) == (False, "permanent")


def test_retryable_until_attempts_exhausted() -> None:
    p = RetryPolicy(max_attempts=3, initial_delay=1.0, jitter=0.0)
    assert decide_failure(p, 1, "Timeout", no_jitter).retry
    assert decide_failure(p, 2, "Timeout", no_jitter).delay == 2.0
    last = decide_failure(p, 3, "Timeout", no_jitter)
    assert (last.retry, last.reason) == (False, "exhausted")


def test_retry_after_wins_over_backoff_even_beyond_max_delay() -> None:
    p = RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=5.0, jitter=0.5)
    d = decide_failure(p, 1, "HTTP429", lambda: 0.9, retry_after=120.0)
    assert (d.retry, d.delay, d.reason) == (True, 120.0, "retry-after")


def test_retry_after_clamped_and_ignored_when_not_honoured() -> None:
    p = RetryPolicy(max_attempts=3, initial_delay=1.0, jitter=0.0)
    assert decide_failure(p, 1, "HTTP429", no_jitter, retry_after=1e9).delay == RETRY_AFTER_CAP_SECONDS
    assert decide_failure(p, 1, "HTTP429", no_jitter, retry_after=-3).delay == 0.0
    q = RetryPolicy(max_attempts=3, initial_delay=1.0, jitter=0.0, honor_retry_after=False)
    assert decide_failure(q, 1, "HTTP429", no_jitter, retry_after=120.0).delay == 1.0


def test_retry_after_does_not_make_a_permanent_failure_retryable() -> None:
    d = decide_failure(RetryPolicy(), 1, "HTTP4xx", no_jitter, retry_after=5.0)
    assert not d.retry


def test_parse_retry_after_seconds_and_dates() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(" 0 ", now) == 0.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(date, now) == pytest.approx(30.0, abs=1.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after(past, now) == 0.0
    for bad in (None, "", "soon", "-5", "1.5"):
        assert parse_retry_after(bad, now) is None
