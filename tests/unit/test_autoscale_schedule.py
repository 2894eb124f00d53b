"""When the autoscaler passes: regular polls, follow-ups (rule 10) and bursts (rule 11)."""

from __future__ import annotations

from trawl.autoscale.policy import FOLLOW_UP_SECONDS
from trawl.autoscale.schedule import TICK_SECONDS, PassSchedule

POLL = 5.0


def _after_pass(at: float, *, enqueued: int = 1000, rate: float = 0.0, follow_up: bool = False) -> PassSchedule:
    return (
        PassSchedule()
        .started(at, scheduled=True)
        .decided(at, follow_up=follow_up, enqueued=enqueued, arrival_rate=rate, concurrency=32)
    )


def test_the_first_tick_passes_then_every_poll_with_half_a_tick_of_slack() -> None:
    assert PassSchedule().regular_due(0.0, POLL)
    s = _after_pass(100.0)
    assert not s.regular_due(100.0 + POLL - TICK_SECONDS, POLL)
    assert s.regular_due(100.0 + POLL - TICK_SECONDS / 2, POLL)  # a timer firing slightly early
    assert s.regular_due(100.0 + POLL, POLL)


def test_a_follow_up_comes_after_one_second_once() -> None:
    s = _after_pass(100.0, follow_up=True)
    assert s.regular_due(100.0 + FOLLOW_UP_SECONDS, POLL)
    assert s.interval(0.5) == 0.5  # never later than pollSeconds
    s = s.started(101.0, scheduled=True)  # the follow-up itself clears it
    assert not s.follow_up
    assert not s.regular_due(102.0, POLL)


def test_a_burst_beyond_the_measured_rate_and_its_noise_brings_the_pass_forward() -> None:
    s = _after_pass(100.0, enqueued=1000, rate=0.0)
    assert not s.burst_due(101.0, 1000 + 31)  # less than one worker's slots
    assert s.burst_due(101.0, 1000 + 32)
    # 100/s measured: two seconds later 200 are expected, plus three standard deviations (~42).
    s = _after_pass(100.0, enqueued=1000, rate=100.0)
    assert not s.burst_due(102.0, 1000 + 200 + 42 + 31)
    assert s.burst_due(102.0, 1000 + 200 + 43 + 32)


def test_a_steady_fast_stream_is_no_burst() -> None:
    """Poisson arrivals at the measured rate never reach the threshold on a tick (three sigmas plus a worker)."""
    import random

    rng = random.Random(3)
    rate = 1000.0
    s = _after_pass(0.0, enqueued=0, rate=rate)
    t, n, bursts = 0.0, 0, 0
    for tick in range(1, 5 * 200):
        while True:
            t += rng.expovariate(rate)
            if t > tick:
                break
            n += 1
        if tick % 5 == 0:  # a scheduled pass every pollSeconds: a new baseline
            s = _after_pass(float(tick), enqueued=n, rate=rate)
        elif s.burst_due(float(tick), n):
            bursts += 1
    assert bursts <= 2, bursts  # a 3-sigma excursion now and then, not every tick


def test_a_burst_pass_keeps_the_cadence_and_no_baseline_means_no_burst() -> None:
    s = _after_pass(100.0)
    burst = s.started(102.0, scheduled=False)
    assert burst.scheduled_at == 100.0  # the next regular poll is still at 105
    assert burst.regular_due(105.0, POLL) and not burst.regular_due(103.0, POLL)
    # Between its start and its decision a pass has no baseline (it may fail before deciding).
    assert not burst.burst_due(103.0, 10**9)
    assert not PassSchedule().burst_due(1.0, 10**9)
    undecided = burst.decided(102.5, follow_up=False, enqueued=None, arrival_rate=5.0, concurrency=32)
    assert not undecided.burst_due(103.0, 10**9)
