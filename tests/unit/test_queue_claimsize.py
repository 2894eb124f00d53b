"""The claim-size decision (trawl.queue.claimsize): adaptive to free slots and task time, bounded, settable."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trawl.queue.claimsize import (
    AUTO,
    MAX_CLAIM,
    ClaimState,
    TaskTimer,
    ahead_limit,
    claim_size,
    parse_setting,
)


def state(conc: int, running: int = 0, buffered: int = 0, t: float | None = None, lease: float = 30.0) -> ClaimState:
    return ClaimState(concurrency=conc, running=running, buffered=buffered, lease_seconds=lease, task_seconds=t)


def test_first_claim_fills_every_slot_not_a_quarter() -> None:
    # Before any task finished the worker knows nothing about task time: one claim for all its slots.
    assert claim_size(state(8)) == 8
    assert claim_size(state(32)) == 32


def test_fast_tasks_get_a_buffer_of_one_more_round() -> None:
    # 1 ms tasks at concurrency 8: 800 would start within 0.1 s, capped at one more round of 8.
    assert ahead_limit(state(8, t=0.001)) == 8
    assert claim_size(state(8, t=0.001)) == 16


def test_slow_tasks_get_no_buffer() -> None:
    # 10 s pages: a buffered task would wait seconds for a slot while another worker could run it.
    assert ahead_limit(state(32, t=10.0)) == 0
    assert claim_size(state(32, running=31, t=10.0)) == 1  # an idle slot is filled at once
    assert claim_size(state(32, running=32, t=10.0)) == 0


def test_buffer_bounded_by_the_lease() -> None:
    # 0.2 s tasks at concurrency 8: 4 start within 0.1 s; with a 1 s lease, only 2 within 5% of it.
    assert ahead_limit(state(8, t=0.2, lease=30.0)) == 4
    assert ahead_limit(state(8, t=0.2, lease=1.0)) == 2


def test_waits_for_half_the_target_while_the_buffer_covers() -> None:
    fast = 0.001  # target = 8 running + 8 buffered = 16
    assert claim_size(state(8, running=8, buffered=6, t=fast)) == 0  # 2 missing: the buffer covers the trip
    assert claim_size(state(8, running=8, buffered=1, t=fast)) == 0  # 7 missing, below half: wait
    assert claim_size(state(8, running=8, buffered=0, t=fast)) == 8
    assert claim_size(state(8, running=7, buffered=0, t=fast)) == 9  # an idle slot: claim at once


def test_fixed_setting_claims_that_many_when_there_is_room() -> None:
    assert claim_size(state(8), setting=2) == 2
    assert claim_size(state(8, running=7), setting=2) == 0  # room for 1 only: wait for a whole batch
    assert claim_size(state(8, running=6), setting=2) == 2
    # More than the concurrency: Celery-like prefetch of the difference...
    assert claim_size(state(8), setting=50) == 50
    assert claim_size(state(8, running=8, buffered=42), setting=50) == 0
    # ... bounded by half the lease once the task time is known (1 s tasks, 30 s lease: 8 * 15 = 120).
    assert ahead_limit(state(8, t=1.0), setting=500) == 120


def test_parse_setting() -> None:
    assert parse_setting("auto") == AUTO
    assert parse_setting("") == AUTO
    assert parse_setting(None) == AUTO
    assert parse_setting(" 16 ") == 16
    assert parse_setting(16) == 16
    for bad in ("-1", "1001", "many", "1.5"):
        with pytest.raises(ValueError, match="claim batch"):
            parse_setting(bad)


def test_task_timer_follows_the_mean() -> None:
    timer = TaskTimer(weight=0.5)
    assert timer.mean is None
    timer.observe(1.0)
    assert timer.mean == 1.0
    timer.observe(3.0)
    assert timer.mean == 2.0
    timer.observe(-1.0)  # a clock step backwards counts as 0
    assert timer.mean == 1.0


@given(
    conc=st.integers(1, 2048),
    running=st.integers(0, 2048),
    buffered=st.integers(0, 3000),
    t=st.one_of(st.none(), st.floats(0.0, 1000.0)),
    lease=st.floats(0.1, 3600.0),
    setting=st.integers(0, MAX_CLAIM),
)
@example(conc=1, running=0, buffered=0, t=2.2e-313, lease=1.0, setting=2)  # once divided into infinity
def test_never_overfills_and_never_starves(
    conc: int, running: int, buffered: int, t: float | None, lease: float, setting: int
) -> None:
    running = min(running, conc)
    s = state(conc, running, buffered, t, lease)
    n = claim_size(s, setting)
    assert 0 <= n <= MAX_CLAIM
    # Never more held than the slots plus the buffer the rules allow.
    assert running + buffered + n <= max(conc + ahead_limit(s, setting), running + buffered)
    # An idle worker (nothing running, nothing buffered) always claims something.
    if running == 0 and buffered == 0:
        assert n >= 1
    if setting != AUTO:
        assert n <= setting
