"""The scaling policy, rule by rule (see the rules in trawl.autoscale.policy)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import pytest

from trawl.api.scrapepool import AutoscalingSpec
from trawl.autoscale import Action, Observation, ScalerState, decide
from trawl.autoscale.policy import (
    FOLLOW_UP_SECONDS,
    MIN_DOWN_SHARE,
    MIN_DOWN_WORKERS,
    choose_cordoned,
    queue_wait_p95,
)

NOW = 10_000.0


def spec(**kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {
        "min_replicas": 0,
        "max_replicas": 10,
        "target_drain_seconds": 60,
        "failure_rate_threshold": 0.5,
        "scale_down_delay_seconds": 60,
        "idle_seconds_before_zero": 120,
    }
    base.update(kw)
    return AutoscalingSpec(**base)


def obs(**kw: Any) -> Observation:
    base: dict[str, Any] = {
        "now": NOW,
        "current_replicas": 2,
        "per_worker_throughput": 20.0,
        "mean_service_seconds": 1.5,
        "failure_rate": 0.0,
        "concurrency": 32,
        "drain_seconds": 30.0,
        "startup_seconds": 15.0,
    }
    base.update(kw)
    return Observation(**base)


OLD = ScalerState(last_change_at=NOW - 1000)
# Lower answers (1) recorded for a full 60 s window, last scale-up long ago.
PENDING = ScalerState(last_change_at=NOW - 1000, answers=((NOW - 30, 1),), answers_since=NOW - 61)

CASES: list[tuple[str, dict[str, Any], dict[str, Any], ScalerState, int, Action]] = [
    # name, spec overrides, observation overrides, state, desired, action
    # Rule 1: Little's law. 2400 tasks, 1 serving pod doing 20/s: 1200 in 60 s; the rest by new pods
    # that serve 45 of the 60 s: 1 + ceil(1200 / (20 * 45)) = 3.
    ("littles_law_up", {}, {"current_replicas": 1, "ready": 2400}, OLD, 3, Action.SCALE_UP),
    # 30 in flight + 60 s of 40/s = 2430 tasks: 1 + ceil(1230 / 900) = 3.
    ("arrivals_count", {}, {"current_replicas": 1, "arrival_rate": 40.0, "in_flight": 30}, OLD, 3, Action.SCALE_UP),
    # Arrivals alone, queueing: 60/s at 20/s per worker (32 slots, 1.6 s each) is 96 busy slots; 3 workers
    # (96 slots) cannot keep up, 4 keep the p95 queueing wait within a poll (Erlang C).
    ("arrivals_queue", {}, {"current_replicas": 4, "arrival_rate": 60.0}, OLD, 4, Action.HOLD),
    ("huge_backlog_capped_at_max", {}, {"ready": 10**7}, OLD, 10, Action.SCALE_UP),
    ("steady", {}, {"current_replicas": 1, "in_flight": 20, "arrival_rate": 10.0}, OLD, 1, Action.HOLD),
    # No throughput measured yet: bounded guess, max(2 x current, current + 4) and useful parallelism.
    (
        "no_throughput_bounded_guess",
        {},
        {"current_replicas": 1, "ready": 1000, "per_worker_throughput": None, "mean_service_seconds": None},
        OLD,
        5,
        Action.SCALE_UP,
    ),
    (
        "no_throughput_wait_for_starting_pods",
        {},
        {
            "current_replicas": 4,
            "serving_workers": 1,
            "ready": 1000,
            "per_worker_throughput": None,
            "mean_service_seconds": None,
        },
        OLD,
        4,
        Action.HOLD,
    ),
    (
        "no_throughput_small_backlog",
        {},
        {"current_replicas": 1, "ready": 20, "per_worker_throughput": None, "mean_service_seconds": None},
        OLD,
        1,
        Action.HOLD,
    ),
    # Service time alone gives a capacity (32 slots / 2 s = 16/s per worker).
    (
        "service_time_capacity",
        {},
        {"current_replicas": 1, "ready": 1920, "per_worker_throughput": None, "mean_service_seconds": 2.0},
        OLD,
        3,
        Action.SCALE_UP,
    ),
    # Rule 2: never more workers than the work can keep busy (40 tasks, 32 slots: 2).
    (
        "useful_parallelism",
        {},
        {"current_replicas": 1, "ready": 40, "per_worker_throughput": 0.01},
        OLD,
        2,
        Action.SCALE_UP,
    ),
    (
        "rate_limit_ceiling",
        {},
        {"current_replicas": 1, "ready": 3000, "rate_limit_ceiling_replicas": 1},
        OLD,
        1,
        Action.HOLD,
    ),
    (
        "rate_limit_ceiling_from_zero",
        {},
        {"current_replicas": 0, "ready": 3000, "rate_limit_ceiling_replicas": 2},
        OLD,
        1,
        Action.ACTIVATE,
    ),
    # min = max pins the count whatever the work.
    ("min_eq_max_idle", {"min_replicas": 3, "max_replicas": 3}, {"current_replicas": 3}, PENDING, 3, Action.HOLD),
    (
        "min_eq_max_busy",
        {"min_replicas": 3, "max_replicas": 3},
        {"current_replicas": 3, "ready": 10**6},
        OLD,
        3,
        Action.HOLD,
    ),
    ("below_min_goes_up", {"min_replicas": 4}, {"current_replicas": 2}, OLD, 4, Action.SCALE_UP),
    ("zero_below_min_goes_up", {"min_replicas": 2}, {"current_replicas": 0}, OLD, 2, Action.SCALE_UP),
    ("activation_at_least_min", {"min_replicas": 3}, {"current_replicas": 0, "ready": 1}, OLD, 3, Action.ACTIVATE),
    ("above_max_down_at_once", {"max_replicas": 4}, {"current_replicas": 9, "ready": 10**6}, OLD, 4, Action.SCALE_DOWN),
    ("guard_respects_min", {"min_replicas": 4}, {"current_replicas": 2, "failure_rate": 0.9}, OLD, 4, Action.SCALE_UP),
    # Rule 3: workers holding tasks stay while a backlog waits...
    (
        "busy_protected_with_backlog",
        {},
        {"current_replicas": 5, "ready": 10, "in_flight": 100, "busy_workers": 5, "per_worker_throughput": 1000.0},
        PENDING,
        5,
        Action.HOLD,
    ),
    # ... or while tasks may outlive the drain (120 s tasks, 30 s drain) ...
    (
        "busy_protected_long_tasks",
        {},
        {
            "current_replicas": 5,
            "in_flight": 5,
            "busy_workers": 5,
            "mean_service_seconds": 120.0,
            "per_worker_throughput": None,
        },
        PENDING,
        5,
        Action.HOLD,
    ),
    # ... but short tasks with nothing waiting drain on SIGTERM: scale down.
    (
        "short_tasks_drain",
        {},
        {"current_replicas": 5, "in_flight": 5, "busy_workers": 5},
        PENDING,
        1,
        Action.SCALE_DOWN,
    ),
    # Retries waiting for their backoff (a failing site's) are not tasks waiting for a worker: they do not
    # pin busy workers (the bench's failing_downstream held a second pod through the whole outage).
    (
        "retries_due_do_not_pin_busy_workers",
        {},
        {"current_replicas": 2, "delayed_due_soon": 60, "in_flight": 16, "busy_workers": 2, "failure_rate": 0.9},
        PENDING,
        1,
        Action.SCALE_DOWN,
    ),
    # Rule 4: failure guard.
    ("failure_burst_holds", {}, {"ready": 5000, "failure_rate": 0.9}, OLD, 2, Action.FAILURE_GUARD),
    (
        "failure_guard_hysteresis_holds",
        {},
        {"ready": 5000, "failure_rate": 0.45},
        replace(OLD, guard_active=True),
        2,
        Action.FAILURE_GUARD,
    ),
    (
        "failure_guard_released",
        {},
        {"ready": 5000, "failure_rate": 0.3},
        replace(OLD, guard_active=True),
        5,
        Action.SCALE_UP,
    ),
    ("failure_below_threshold_scales", {}, {"ready": 5000, "failure_rate": 0.45}, OLD, 5, Action.SCALE_UP),
    (
        "failure_guard_allows_down",
        {},
        {"current_replicas": 5, "failure_rate": 0.9, "in_flight": 3},
        replace(PENDING, guard_active=True),
        1,
        Action.SCALE_DOWN,
    ),
    (
        "failure_guard_activation_one",
        {},
        {"current_replicas": 0, "ready": 5000, "failure_rate": 0.9},
        OLD,
        1,
        Action.ACTIVATE,
    ),
    # Rule 5: down only after the delay, to the highest answer of the window.
    ("down_waits", {}, {"current_replicas": 5, "in_flight": 3}, OLD, 5, Action.SCALE_DOWN_PENDING),
    (
        "down_to_peak",
        {},
        {"current_replicas": 5, "in_flight": 3},
        replace(PENDING, answers=((NOW - 50, 3), (NOW - 30, 1))),
        3,
        Action.SCALE_DOWN,
    ),
    (
        "no_down_right_after_scale_up",
        {},
        {"current_replicas": 5, "in_flight": 3},
        replace(PENDING, last_change_at=NOW - 10, answers=((NOW - 10, 5),), answers_since=NOW - 10),
        5,
        Action.SCALE_DOWN_PENDING,
    ),
    (
        "zero_delay_down_at_once",
        {"scale_down_delay_seconds": 0},
        {"current_replicas": 5, "in_flight": 3},
        OLD,
        1,
        Action.SCALE_DOWN,
    ),
    # Rule 6: zero and activation.
    ("keep_one_until_idle", {}, {"current_replicas": 3}, replace(PENDING, idle_since=NOW - 30), 1, Action.SCALE_DOWN),
    ("to_zero_after_idle", {}, {"current_replicas": 1}, replace(OLD, idle_since=NOW - 121), 0, Action.SCALE_TO_ZERO),
    (
        "not_zero_when_min_positive",
        {"min_replicas": 1},
        {"current_replicas": 1},
        replace(OLD, idle_since=NOW - 1000),
        1,
        Action.HOLD,
    ),
    ("activate_on_first_task", {}, {"current_replicas": 0, "ready": 1}, OLD, 1, Action.ACTIVATE),
    ("activate_on_due_delayed", {}, {"current_replicas": 0, "delayed_due_soon": 3}, OLD, 1, Action.ACTIVATE),
    ("idle_at_zero", {}, {"current_replicas": 0}, OLD, 0, Action.HOLD),
    (
        "activate_big_backlog",
        {},
        {"current_replicas": 0, "ready": 100_000, "per_worker_throughput": None, "mean_service_seconds": None},
        OLD,
        1,  # activation is one worker; the next poll sizes from its measurement
        Action.ACTIVATE,
    ),
]


@pytest.mark.parametrize(("name", "spec_kw", "obs_kw", "state", "desired", "action"), CASES, ids=[c[0] for c in CASES])
def test_rule(
    name: str, spec_kw: dict[str, Any], obs_kw: dict[str, Any], state: ScalerState, desired: int, action: Action
) -> None:
    d = decide(spec(**spec_kw), obs(**obs_kw), state)
    assert (d.desired, d.action) == (desired, action), d.reason
    assert d.reason
    assert d.changed == (d.desired != d.current)
    if d.changed:
        assert d.state.last_change_at == NOW
    assert spec(**spec_kw).min_replicas <= d.desired <= spec(**spec_kw).max_replicas or d.desired == 0


def test_flags_for_conditions() -> None:
    at_max = decide(spec(), obs(ready=10**7), OLD)
    assert at_max.at_max and at_max.limited and not at_max.failure_guard
    limited = decide(spec(), obs(ready=3000, rate_limit_ceiling_replicas=1), OLD)
    assert limited.rate_limited and limited.limited
    assert "rate limits" in limited.reason
    guard = decide(spec(), obs(ready=5000, failure_rate=0.9), OLD)
    assert guard.failure_guard and guard.state.guard_active
    assert "90%" in guard.reason


def test_disabled_keeps_current() -> None:
    d = decide(spec(enabled=False), obs(ready=10**6, current_replicas=3))
    assert (d.desired, d.action) == (3, Action.DISABLED)


def test_unknown_failure_rate_keeps_guard_state() -> None:
    d = decide(spec(), obs(ready=5000, failure_rate=None), replace(OLD, guard_active=True))
    assert d.action is Action.FAILURE_GUARD


def _run(sequence: list[Observation], s: AutoscalingSpec) -> list[int]:
    state: ScalerState | None = None
    current = sequence[0].current_replicas
    out = []
    for o in sequence:
        # The pods removed were the idle ones (pod-deletion-cost): the busiest loads remain.
        loads = tuple(sorted(o.worker_loads, reverse=True)[:current])
        d = decide(s, replace(o, current_replicas=current, worker_loads=loads), state)
        state, current = d.state, d.desired
        out.append(current)
    return out


def test_scale_down_needs_the_whole_delay_then_goes_down_once() -> None:
    seq = [obs(now=NOW + 5 * i, current_replicas=6, in_flight=3) for i in range(30)]
    counts = _run(seq, spec())
    first_down = counts.index(1)
    assert counts[:first_down] == [6] * first_down
    assert first_down * 5 >= 60
    assert set(counts[first_down:]) == {1}


def test_scale_down_follows_the_window_poll_by_poll() -> None:
    """A backlog that shrinks steadily (and never quite drains): after the first full window the pool
    steps down poll by poll to the highest answer of the last scaleDownDelaySeconds, not once per delay."""
    s = spec(max_replicas=20, scale_down_delay_seconds=60)
    seq = [
        obs(now=NOW + 5 * i, current_replicas=12, ready=max(50, 12_000 - 600 * i), in_flight=32, busy_workers=1)
        for i in range(40)
    ]
    counts = _run(seq, s)
    first_down = next(i for i, (a, b) in enumerate(itertools.pairwise(counts), 1) if b < a)
    assert first_down >= 12, counts  # a full 60 s window after the scale-up first
    tail = counts[first_down:]
    steps = sum(1 for a, b in itertools.pairwise(tail) if b < a)
    assert steps >= 3, counts  # then several steps, one poll apart, not one per 60 s
    assert tail == sorted(tail, reverse=True) and counts[-1] == 1, counts


def test_a_drained_backlog_releases_the_workers_sized_for_it() -> None:
    """A burst drained well within the window: the answers it asked for were for the backlog, which is
    gone, so the pool goes to what the arrivals ask for at the first poll without a backlog (not a full
    window later); answers given without a backlog still hold the pool for the whole window."""
    s = spec(max_replicas=20, scale_down_delay_seconds=60)
    seq = [obs(now=NOW + 5 * i, current_replicas=1, ready=6000 if i < 3 else 0, in_flight=32 if i < 4 else 3)
           for i in range(12)]  # fmt: skip
    counts = _run(seq, s)
    assert counts[0] > 5, counts
    assert counts[4:] == [1] * 8, counts  # down at the second poll in a row without a backlog (i = 4)

    # The same pool sized by arrivals alone (no backlog at any poll): a full window first.
    seq = [obs(now=NOW + 5 * i, current_replicas=1, arrival_rate=200.0 if i < 3 else 1.0,
               recent_arrival_rate=200.0 if i < 3 else 1.0, in_flight=32 if i < 4 else 3)
           for i in range(20)]  # fmt: skip
    counts = _run(seq, s)
    first_down = next(i for i, (a, b) in enumerate(itertools.pairwise(counts), 1) if b < a)
    assert counts[0] > 5 and first_down * 5 >= 60, counts


def test_queue_wait_p95_erlang_c() -> None:
    """M/M/c: no wait far below capacity, a wait growing toward capacity, infinite beyond it."""
    assert queue_wait_p95(32, 10.0, 1 / 1.5) == 0.0  # 15 of 32 slots busy
    edge = queue_wait_p95(32, 20.0, 1 / 1.5)  # 30 of 32: most tasks wait a little
    assert 1.0 < edge < 3.0
    assert queue_wait_p95(32, 21.0, 1 / 1.5) > edge
    assert queue_wait_p95(32, 22.0, 1 / 1.5) == math.inf


def test_arrivals_are_sized_for_a_queueing_wait_within_one_poll() -> None:
    """20/s of 1.5 s tasks on 32-slot workers (21.3/s each): one worker keeps the p95 queueing wait
    under a 5 s poll (no 80 % utilisation margin doubling the pool); a 1 s poll asks for two."""
    o = obs(current_replicas=1, in_flight=30, arrival_rate=20.0, per_worker_throughput=32 / 1.5)
    assert decide(spec(poll_seconds=5, target_drain_seconds=30), o).need == 1
    assert decide(spec(poll_seconds=1, target_drain_seconds=30), o).need == 2


def test_the_arrival_rate_is_the_last_polls_when_it_is_the_better_guess() -> None:
    """While a worker's slots of new tasks wait a burst is starting: the last poll's rate when it is above
    the average. With none waiting the burst is absorbed: the last poll's rate when it is below it."""
    s = spec(max_replicas=50)
    burst = obs(current_replicas=1, ready=300, arrival_rate=20.0, recent_arrival_rate=60.0)
    avg = replace(burst, recent_arrival_rate=None)
    assert decide(s, burst).desired > decide(s, avg).desired
    # A few ready tasks (fewer than one worker's slots) are queueing noise at high utilisation: the average.
    noise = obs(current_replicas=1, ready=3, in_flight=32, arrival_rate=20.0, recent_arrival_rate=24.0,
                per_worker_throughput=32 / 1.5)  # fmt: skip
    assert decide(s, noise).need == 1 < decide(s, replace(noise, ready=40)).need
    # Retries waiting for their backoff are a failing target's arrivals, not a burst: the average.
    retries = obs(current_replicas=2, delayed_due_soon=50, in_flight=10, arrival_rate=20.0, recent_arrival_rate=40.0)
    assert decide(s, retries).need == decide(s, replace(retries, recent_arrival_rate=None)).need
    calm = obs(current_replicas=1, in_flight=3, arrival_rate=200.0, recent_arrival_rate=1.0)
    assert decide(s, replace(calm, recent_arrival_rate=None)).need > decide(s, calm).need == 1


def test_busy_workers_are_a_floor_outside_the_window() -> None:
    """Long tasks ending one worker at a time: a worker goes as soon as its last task ends (its answer was
    never demand, and an idle worker is not what the arrivals need: rule 9), so nothing idles for a
    further delay, not even in the first window after the scale-up."""
    s = spec(max_replicas=20, scale_down_delay_seconds=60)
    busy = [max(0, 12 - i // 2) for i in range(40)]  # one worker's last task ends every 10 s
    seq = [
        obs(
            now=NOW + 5 * i,
            current_replicas=12,
            in_flight=b,
            busy_workers=b,
            worker_loads=(1,) * b + (0,) * (12 - b),  # each busy worker holds its last task
            mean_service_seconds=120.0,
            per_worker_throughput=None,
        )
        for i, b in enumerate(busy)
    ]
    counts = _run(seq, s)
    assert counts[0] == 12
    assert all(c >= max(1, b) for c, b in zip(counts, busy, strict=True)), counts  # never below busy
    steps = [(a, b) for a, b in itertools.pairwise(counts) if b != a]
    assert all(b < a for a, b in steps), counts
    # Each step is worth its Event: idle workers go two at a time at least (rule 9), or down to the floor...
    assert all(b == 1 or a - b >= MIN_DOWN_WORKERS for a, b in steps), counts
    # ...a quarter of the window (15 s, three polls) after the previous one...
    changes = [i for i, (a, b) in enumerate(itertools.pairwise(counts)) if b != a]
    assert all(j - i >= 3 for i, j in itertools.pairwise(changes)), counts
    # ...and no worker idles longer than it takes a fifth of the pool to free up (and the spacing).
    assert all(c <= max(1, b) + math.ceil(MIN_DOWN_SHARE * 12) + 1 for c, b in zip(counts, busy, strict=True)), counts
    assert counts[-1] == 1, counts


def test_small_scale_down_steps_wait_until_they_add_up() -> None:
    """A window peak one below a pool of 10 is not worth an Event; two below (a fifth) is, once a
    quarter of the window has passed since the last change."""
    st = replace(PENDING, answers=((NOW - 30, 9),))
    d = decide(spec(max_replicas=20), obs(current_replicas=10, in_flight=3), st)
    assert (d.desired, d.action) == (10, Action.SCALE_DOWN_PENDING), d.reason
    st = replace(PENDING, answers=((NOW - 30, 8),))
    d = decide(spec(max_replicas=20), obs(current_replicas=10, in_flight=3), st)
    assert (d.desired, d.action) == (8, Action.SCALE_DOWN), d.reason
    # A step right after the previous change waits a quarter of the window (60 s here).
    d = decide(spec(max_replicas=20), obs(current_replicas=10, in_flight=3), replace(st, last_change_at=NOW - 10))
    assert (d.desired, d.action) == (10, Action.SCALE_DOWN_PENDING), d.reason
    d = decide(spec(max_replicas=20), obs(current_replicas=10, in_flight=3), replace(st, last_change_at=NOW - 15))
    assert (d.desired, d.action) == (8, Action.SCALE_DOWN), d.reason


def test_an_answer_at_or_above_current_in_the_window_blocks_scale_down() -> None:
    high_at = NOW - 20
    st = replace(PENDING, answers=((NOW - 50, 1), (high_at, 5)))
    d = decide(spec(), obs(current_replicas=5, in_flight=3), st)
    assert (d.desired, d.action) == (5, Action.SCALE_DOWN_PENDING), d.reason
    assert "scale-down in 40s" in d.reason
    later = decide(spec(), obs(now=NOW + 41, current_replicas=5, in_flight=3), d.state)
    assert (later.desired, later.action) == (1, Action.SCALE_DOWN), later.reason


def test_flapping_input_does_not_flap() -> None:
    # Backlog alternates between 5000 and nothing every poll for ten minutes.
    seq = [obs(now=NOW + 5 * i, current_replicas=1, ready=5000 if i % 2 == 0 else 0, in_flight=32) for i in range(120)]
    counts = _run(seq, spec())
    changes = sum(1 for a, b in itertools.pairwise(counts) if a != b)
    assert counts[0] > 1
    assert changes <= 1


def test_slow_flapping_hysteresis() -> None:
    # Busy for 40 s, quiet for 40 s: shorter than the 60 s delay, so it never goes down.
    seq = [
        obs(now=NOW + 5 * i, current_replicas=1, ready=3000 if (i // 8) % 2 == 0 else 0, in_flight=32)
        for i in range(96)
    ]
    counts = _run(seq, spec())
    # Up at the first poll; the first drained backlog releases the pool, and the backlog's return within
    # a window suspends that: one bounce, then at most one correction down (new pods counted as
    # serving late) and never back up: no cycle.
    changes = [(a, b) for a, b in itertools.pairwise(counts) if a != b]
    assert counts[0] > 1
    assert len(changes) <= 3, changes
    assert [b > a for a, b in changes][:2] == [False, True] and all(b < a for a, b in changes[2:]), changes


def test_scale_to_zero_then_activation() -> None:
    s = spec(idle_seconds_before_zero=120, scale_down_delay_seconds=60)
    seq = [obs(now=NOW + 5 * i, current_replicas=3) for i in range(40)]
    seq += [obs(now=NOW + 200 + 5 * i, current_replicas=0, ready=7) for i in range(2)]
    counts = _run(seq, s)
    assert counts[:12] == [3] * 12  # 60 s delay
    assert 0 in counts[:40] and counts.index(0) * 5 >= 120
    assert counts[40] >= 1  # first task: activation at once


def test_pure_and_deterministic() -> None:
    o = obs(ready=1234, in_flight=50, arrival_rate=3.0)
    assert decide(spec(), o, OLD) == decide(spec(), o, OLD)


def test_untried_work_waits_one_poll_then_scales_or_is_guarded() -> None:
    """New work nobody has tried yet: hold one poll; then size it, or hold if it fails fast."""
    base = {"current_replicas": 1, "ready": 3000, "in_flight": 0, "per_worker_throughput": 10.0}
    untried = decide(spec(), obs(**base, recent_attempts=0), OLD)
    assert (untried.desired, untried.action) == (1, Action.HOLD), untried.reason
    assert "without results yet" in untried.reason
    assert untried.follow_up  # looked at again after a second, not a whole pollSeconds later
    again = decide(spec(), obs(**base, now=NOW + FOLLOW_UP_SECONDS, recent_attempts=0), untried.state)
    assert (again.action, again.follow_up) == (Action.HOLD, True), again.reason  # every second until results
    tried = decide(spec(), obs(**base, recent_attempts=40, failure_rate=0.0), untried.state)
    assert tried.action == Action.SCALE_UP and tried.desired > 1, tried.reason
    failing = decide(spec(), obs(**base, recent_attempts=40, failure_rate=1.0), untried.state)
    assert (failing.desired, failing.action) == (1, Action.FAILURE_GUARD), failing.reason


def test_the_every_second_look_at_untried_work_ends_after_a_poll_and_a_start_up() -> None:
    """Results that do not come (pods that cannot start, first tasks of minutes): the hold stays, but it is
    looked at every second only for pollSeconds + start-up, then at the regular polls; results reset it."""
    base = {"current_replicas": 1, "ready": 3000, "in_flight": 0, "recent_attempts": 0, "startup_seconds": 15.0}
    s = spec(poll_seconds=5)
    state, looks = OLD, []
    for i in range(30):
        d = decide(s, obs(**base, now=NOW + i), state)
        assert d.action == Action.HOLD, d.reason
        looks.append(d.follow_up)
        state = d.state
    assert looks == [True] * 20 + [False] * 10  # 5 s poll + 15 s start-up
    tried = decide(s, obs(**base | {"recent_attempts": 40}, now=NOW + 31), state)
    assert tried.state.untried_since is None
    fresh = decide(s, obs(**base, now=NOW + 32), tried.state)  # new untried work later: every second again
    assert fresh.follow_up and fresh.state.untried_since == NOW + 32


def test_work_claimed_since_an_idle_poll_waits_one_poll_for_its_results() -> None:
    """An idle pool's worker claimed a new job's first tasks just before the poll: in flight, no result yet.

    Hold one poll (a failing target shows on the next); work that was already running before does not hold."""
    base = {"current_replicas": 1, "ready": 3000, "in_flight": 8, "per_worker_throughput": 10.0}
    idle = decide(spec(), obs(current_replicas=1, ready=0, in_flight=0), OLD)
    assert idle.state.idle_since is not None
    first = decide(spec(), obs(**base, now=NOW + 1, recent_attempts=0), idle.state)
    assert (first.desired, first.action) == (1, Action.HOLD), first.reason
    failing = decide(spec(), obs(**base, now=NOW + 2, recent_attempts=40, failure_rate=1.0), first.state)
    assert (failing.desired, failing.action) == (1, Action.FAILURE_GUARD), failing.reason
    busy = decide(spec(), obs(**base, recent_attempts=0), OLD)  # running before this poll: sized now
    assert busy.action == Action.SCALE_UP and busy.desired > 1, busy.reason


def test_no_growth_on_a_poll_whose_attempts_mostly_failed() -> None:
    """Fewer attempts than the guard needs, but failing: the smoothed rate (earlier successes) is not trusted."""
    base = {"current_replicas": 1, "ready": 3000, "in_flight": 8, "per_worker_throughput": 10.0, "failure_rate": 0.05}
    d = decide(spec(), obs(**base, recent_attempts=6, recent_failed=6), OLD)
    assert (d.desired, d.action) == (1, Action.HOLD), d.reason
    ok = decide(spec(), obs(**base, recent_attempts=6, recent_failed=0), OLD)
    assert ok.action == Action.SCALE_UP, ok.reason
    # Slow failures show late: 45 % of the poll's attempts failed, under the guard's threshold (50 %) but
    # above its release level (40 %), and the pool does not grow into it either.
    rising = decide(spec(), obs(**base, recent_attempts=40, recent_failed=18), OLD)
    assert (rising.desired, rising.action) == (1, Action.HOLD), rising.reason
    fine = decide(spec(), obs(**base, recent_attempts=40, recent_failed=15), OLD)
    assert fine.action == Action.SCALE_UP, fine.reason


def test_idle_pool_does_not_grow_on_a_stale_arrival_rate() -> None:
    d = decide(
        spec(), obs(current_replicas=1, ready=0, in_flight=0, arrival_rate=50.0, per_worker_throughput=10.0), OLD
    )
    assert d.desired == 1, d.reason


# Rule 8: workers kept only because they hold tasks stop claiming.
LONG = {"mean_service_seconds": 120.0, "per_worker_throughput": None}


def test_workers_kept_only_by_their_tasks_are_cordoned() -> None:
    """Eight workers hold 40 two-minute tasks; the work asks for 2 (ceil(40 / 32)) and the window's
    answers were lower: the pool holds (rule 3), and the 6 workers beyond the answer stop claiming."""
    o = obs(current_replicas=8, in_flight=40, busy_workers=8, **LONG)
    d = decide(spec(), o, PENDING)
    assert (d.desired, d.action, d.cordon) == (8, Action.HOLD, 6)
    # The same when the step down is pending or taken: the cordon counts from the current replicas.
    d = decide(spec(), replace(o, busy_workers=5), PENDING)
    assert (d.desired, d.action, d.cordon) == (5, Action.SCALE_DOWN, 6)


@pytest.mark.parametrize(
    ("name", "o", "state"),
    [
        # A backlog waits: every slot is wanted.
        ("backlog", {"ready": 5}, PENDING),
        # Within the window after a scale-up: its answers may still be needed.
        ("fresh_window", {}, ScalerState(last_change_at=NOW - 20, answers=((NOW - 20, 8),), answers_since=NOW - 20)),
        # An answer of the window as high as the pool.
        ("high_answer", {}, replace(PENDING, answers=((NOW - 30, 8),))),
    ],
)
def test_no_cordon_while_the_workers_may_be_needed(name: str, o: dict[str, Any], state: ScalerState) -> None:
    d = decide(spec(), obs(current_replicas=8, in_flight=40, busy_workers=8, **LONG, **o), state)
    assert d.cordon == 0, (name, d)


def test_no_cordon_when_growing_or_when_the_answer_covers_the_pool() -> None:
    assert decide(spec(), obs(current_replicas=2, ready=2000, **LONG), OLD).cordon == 0
    assert decide(spec(), obs(current_replicas=2, in_flight=60, busy_workers=2, **LONG), PENDING).cordon == 0


def test_cordoned_workers_are_idle_ones_then_those_cordoned_before_then_the_least_busy() -> None:
    workers = {"a": 30, "b": 3, "c": 0, "d": 12, "e": 5}
    assert choose_cordoned(workers, 0) == frozenset()
    assert choose_cordoned(workers, 1) == {"c"}
    assert choose_cordoned(workers, 3) == {"c", "b", "e"}
    # Cordoned at the previous poll: d stays cordoned (its tasks only run out) rather than b taking its place.
    assert choose_cordoned(workers, 2, previous={"d"}) == {"c", "d"}
    assert choose_cordoned(workers, 9) == set(workers)


def test_useful_parallelism_counts_the_arrivals_until_a_new_worker_could_serve() -> None:
    """Nothing measured yet (the bounded guess allows 6): 104 tasks and 6/s arriving. A worker asked for
    at the next poll serves after pollSeconds + start-up (5 + 5 s), so those 60 arrivals need workers
    asked for now: ceil((104 + 60) / 32) = 6 (one poll's arrivals alone would give 5)."""
    o = obs(
        current_replicas=2,
        ready=40,
        in_flight=64,
        busy_workers=2,
        arrival_rate=6.0,
        per_worker_throughput=None,
        mean_service_seconds=None,
        startup_seconds=5.0,
    )
    d = decide(spec(poll_seconds=5), o, OLD)
    assert (d.desired, d.action) == (6, Action.SCALE_UP), d.reason
    # A slower start-up widens the horizon (the bounded guess, max(2 x 2, 2 + 4), caps it here).
    assert decide(spec(poll_seconds=5), replace(o, startup_seconds=15.0), OLD).desired == 6
    assert decide(spec(poll_seconds=5), replace(o, arrival_rate=0.0), OLD).desired == 4  # ceil(104 / 32)


# Rule 9: tasks longer than a poll go to workers already busy; idle ones stay idle.
# A scale-up 10 s ago: its window holds the pool, and a step down would come too soon after it.
FRESH = ScalerState(last_change_at=NOW - 10, answers=((NOW - 10, 5),), answers_since=NOW - 10)
PACK = {
    "current_replicas": 5,
    "busy_workers": 3,
    "in_flight": 60,
    "arrival_rate": 0.1,
    "startup_seconds": 5.0,
    "mean_service_seconds": 120.0,
    "per_worker_throughput": None,
    # A grace period that covers the tasks: rules 3 and 8 do not apply, packing does.
    "drain_seconds": 1200.0,
    "worker_loads": (20, 20, 20, 0, 0),
}


def test_idle_workers_stay_idle_while_busy_workers_have_slots_for_the_arrivals() -> None:
    """Five workers, four hold 20 two-minute tasks each (12 free slots each), 0.1/s arriving: the window
    still holds the pool (one idle worker is not worth a step); one busy worker's free slots hold the
    next task, so the other four (the idle one among them) are cordoned and the next task does not pin
    an idle one."""
    one_idle = PACK | {"busy_workers": 4, "in_flight": 80, "worker_loads": (20, 20, 20, 20, 0)}
    d = decide(spec(poll_seconds=5), obs(**one_idle), FRESH)
    assert (d.desired, d.action, d.cordon) == (5, Action.SCALE_DOWN_PENDING, 4), d.reason
    # Without the workers' loads nothing can be cordoned (the set names reporting workers).
    d = decide(spec(poll_seconds=5), obs(**(one_idle | {"worker_loads": ()})), FRESH)
    assert d.cordon == 0, d.reason


def test_idle_packed_workers_go_without_the_spacing_after_a_scale_up() -> None:
    """Three busy workers and two idle ones 10 s after a scale-up (the pods a burst's last scale-up
    brought up after the burst ended): the busy workers' slots hold the arrivals, so the two idle ones
    go at this poll (cost 0, nothing drained), not after a quarter of the window; the two least busy
    of the three left are cordoned."""
    d = decide(spec(poll_seconds=5), obs(**PACK), FRESH)
    assert (d.desired, d.action, d.cordon) == (3, Action.SCALE_DOWN, 2), d.reason
    # A step down that drains busy workers still waits for the spacing: the same pool with the window's
    # answers at 2 and no idle worker holds.
    busy = PACK | {"busy_workers": 5, "in_flight": 100, "worker_loads": (20, 20, 20, 20, 20)}
    low = replace(FRESH, answers=((NOW - 10, 2),), answers_since=NOW - 70)
    d = decide(spec(poll_seconds=5), obs(**busy), low)
    assert (d.desired, d.action) == (5, Action.SCALE_DOWN_PENDING), d.reason


def test_idle_workers_kept_empty_go_without_waiting_for_the_window() -> None:
    """The same pool 20 s after its scale-up (a quarter of the window since that change): the window's
    answers still hold 5, but the two idle workers are not what the arrivals need; they go (cost 0)."""
    later = replace(FRESH, last_change_at=NOW - 20, answers=((NOW - 20, 5),), answers_since=NOW - 20)
    d = decide(spec(poll_seconds=5), obs(**PACK), later)
    assert (d.desired, d.action) == (3, Action.SCALE_DOWN), d.reason
    # One idle worker of ten is not worth an Event (two workers and a fifth of the pool): it stays,
    # cordoned with the eight least busy.
    loads = (23, 23, 22, 22, 22, 22, 22, 22, 22, 0)
    big = obs(**(PACK | {"current_replicas": 10, "busy_workers": 9, "in_flight": 200, "worker_loads": loads}))
    d = decide(spec(poll_seconds=5), big, replace(later, answers=((NOW - 20, 10),)))
    assert (d.desired, d.action, d.cordon) == (10, Action.SCALE_DOWN_PENDING, 9), d.reason


def test_an_idle_worker_stays_open_when_the_busy_ones_are_full() -> None:
    # 96 tasks fill the three busy workers: one idle worker keeps taking the arrivals (at least one task).
    full = PACK | {"in_flight": 96, "worker_loads": (32, 32, 32, 0, 0)}
    d = decide(spec(poll_seconds=5), obs(**full), FRESH)
    assert d.cordon == 1, d.reason
    # 40/s expected for 10 s (400 tasks) is more than 13 workers' slots: no idle worker is cordoned.
    d = decide(spec(poll_seconds=5), obs(**(full | {"arrival_rate": 40.0})), FRESH)
    assert d.cordon == 0, d.reason


@pytest.mark.parametrize(
    ("name", "o"),
    [
        ("short_tasks", {"mean_service_seconds": 1.5}),  # a task shorter than a poll pins nothing
        ("backlog", {"ready": 5}),  # every slot is wanted
        ("growing", {"ready": 5000}),
    ],
)
def test_no_packing(name: str, o: dict[str, Any]) -> None:
    d = decide(spec(poll_seconds=5), obs(**(PACK | o)), FRESH)
    assert d.cordon == 0, (name, d)


def test_packing_with_unknown_task_length() -> None:
    """Nothing has finished yet (the first tasks of a job): the length is unknown, and may be long."""
    d = decide(spec(poll_seconds=5), obs(**(PACK | {"mean_service_seconds": None})), FRESH)
    # Packed as if long: the two idle workers go, the two least busy of the three left are cordoned.
    assert (d.desired, d.cordon) == (3, 2), d.reason


# Rule 10: a burst's scale-up is looked at again after FOLLOW_UP_SECONDS.
def test_a_scale_up_into_a_burst_asks_for_one_early_follow_up() -> None:
    burst = obs(current_replicas=1, ready=2000, in_flight=32, busy_workers=1)
    d = decide(spec(), burst, OLD)
    assert (d.action, d.follow_up) == (Action.SCALE_UP, True), d.reason
    # The follow-up itself scales again if the burst grew, but asks for no further follow-up.
    nxt = decide(spec(), replace(burst, now=NOW + FOLLOW_UP_SECONDS, current_replicas=d.desired, ready=9000), d.state)
    assert (nxt.action, nxt.follow_up) == (Action.SCALE_UP, False), nxt.reason
    # The regular poll after it may ask again.
    again = replace(burst, now=NOW + 6, current_replicas=nxt.desired, ready=30000)
    assert decide(spec(max_replicas=50), again, nxt.state).follow_up


def test_no_follow_up_for_a_small_backlog_or_a_hold() -> None:
    # Fewer new tasks than one worker's slots: the next regular poll is soon enough.
    small = decide(spec(), obs(current_replicas=1, ready=20, in_flight=32, busy_workers=1, arrival_rate=30.0), OLD)
    assert (small.action, small.follow_up) == (Action.SCALE_UP, False), small.reason
    hold = decide(spec(), obs(current_replicas=2, arrival_rate=20.0, in_flight=20, busy_workers=2), OLD)
    assert not hold.follow_up, hold.reason


def test_packing_keeps_only_the_busiest_workers_open() -> None:
    """With each worker's load known, new long tasks go to the busiest workers, as few as hold what may
    arrive; the rest are cordoned, idle ones and then the least busy (which then empty sooner)."""
    loads = {"worker_loads": (25, 20, 15, 0, 0)}
    # 0.1/s for 10 s (poll + start-up) is one task: the busiest worker's 7 free slots hold it. The idle
    # two go (cost 0); the two least busy stay cordoned.
    d = decide(spec(poll_seconds=5), obs(**(PACK | loads)), FRESH)
    assert (d.desired, d.action, d.cordon) == (3, Action.SCALE_DOWN, 2), d.reason
    # 2/s is 20 tasks: the three busy workers' 7 + 12 + 17 free slots are needed; only the idle two are
    # not, and they go.
    d = decide(spec(poll_seconds=5), obs(**(PACK | loads | {"arrival_rate": 2.0})), FRESH)
    assert (d.desired, d.cordon) == (3, 0), d.reason


def test_a_step_down_removes_two_workers_or_reaches_the_floor() -> None:
    """One worker less is not worth an Event and a ReplicaSet change unless it is the last step."""
    st = replace(PENDING, answers=((NOW - 30, 3),))
    d = decide(spec(), obs(current_replicas=4, in_flight=3), st)
    assert (d.desired, d.action) == (4, Action.SCALE_DOWN_PENDING), d.reason
    d = decide(spec(), obs(current_replicas=4, in_flight=3), replace(st, answers=((NOW - 30, 2),)))
    assert (d.desired, d.action) == (2, Action.SCALE_DOWN), d.reason
    # Down to the floor (one worker kept before zero while work remains), one is enough.
    d = decide(spec(), obs(current_replicas=2, in_flight=3), replace(st, answers=((NOW - 30, 1),)))
    assert (d.desired, d.action) == (1, Action.SCALE_DOWN), d.reason


def test_the_drain_answer_rounds_down_within_a_tenth_of_a_worker() -> None:
    """A pool at 95 % of one worker (19.8/s arriving, 20.8/s per worker) with a few tasks waiting: the
    backlog and 30 s of arrivals are 1.01 workers' worth, which is one worker, not two; 1.2 is two."""
    edge = obs(
        current_replicas=1,
        ready=4,
        in_flight=32,
        busy_workers=1,
        arrival_rate=19.8,
        per_worker_throughput=20.8,
        mean_service_seconds=1.5,
    )
    d = decide(spec(target_drain_seconds=30, poll_seconds=5), edge, OLD)
    assert (d.desired, d.action) == (1, Action.HOLD), d.reason
    d = decide(spec(target_drain_seconds=30, poll_seconds=5), replace(edge, ready=130), OLD)
    assert (d.desired, d.action) == (2, Action.SCALE_UP), d.reason


# Rule 1's arrivals answer at the edge of a worker: the rate's own noise grows nothing.
def test_the_arrivals_answer_needs_more_than_the_rates_noise_to_grow_the_pool() -> None:
    """One worker (32 slots, 20/s) and a 15 s average of Poisson arrivals (standard error sqrt(rate / 30)):
    a rate at the edge where Erlang C asks for a second worker, but within a standard error of a rate one
    worker keeps within the poll's wait, holds at one; a rate that clears the margin grows at once."""
    mu = 20.0

    def one_worker_waits(rate: float) -> float:
        return queue_wait_p95(32, rate, mu / 32)

    edge = next(r / 100 for r in range(1800, 2000) if one_worker_waits(r / 100) > 5.0)  # about 19.6/s
    base = {"current_replicas": 1, "in_flight": 30, "busy_workers": 1, "per_worker_throughput": mu}
    noisy = obs(**base, arrival_rate=edge + 0.2, arrival_rate_stderr=math.sqrt((edge + 0.2) / 30))
    d = decide(spec(poll_seconds=5), noisy, OLD)
    assert (d.desired, d.action) == (1, Action.HOLD), d.reason
    # Without the noise (a measured rate known exactly) the same rate asks for two.
    d = decide(spec(poll_seconds=5), replace(noisy, arrival_rate_stderr=0.0), OLD)
    assert (d.desired, d.action) == (2, Action.SCALE_UP), d.reason
    # A rise beyond the noise grows the pool.
    risen = replace(noisy, arrival_rate=edge + 1.5, arrival_rate_stderr=math.sqrt((edge + 1.5) / 30))
    assert decide(spec(poll_seconds=5), risen, OLD).desired == 2
    # Two workers at the same edge rate keep their answer of two (the margin only guards growth).
    two = replace(noisy, current_replicas=2, busy_workers=2)
    assert decide(spec(poll_seconds=5), two, OLD).need == 2


# Rule 4's companion: retries do not grow the pool.
def test_retries_alone_do_not_grow_the_pool() -> None:
    """A pool at the edge of one worker seconds into an outage of slow failures: 15 retries due soon and
    3/s of failed attempts coming back are what tips the drain answer to two workers; without them one
    does. It holds while attempts fail; the same backlog of new tasks grows it."""
    base = {"current_replicas": 1, "busy_workers": 1, "in_flight": 32, "ready": 21, "per_worker_throughput": 21.2}
    failing = obs(
        **base, delayed_due_soon=15, arrival_rate=21.7, retry_rate=3.0, failure_rate=0.15,
        recent_attempts=100, recent_failed=15,
    )  # fmt: skip
    d = decide(spec(target_drain_seconds=30), failing, OLD)
    assert (d.desired, d.action) == (1, Action.HOLD), d.reason
    assert "only retries" in d.reason
    # The target recovered (nothing failed since the last poll): the retries left are work like any.
    recovered = replace(failing, recent_failed=0)
    assert decide(spec(target_drain_seconds=30), recovered, OLD).desired == 2
    fresh = obs(**(base | {"ready": 36}), arrival_rate=21.7)
    d = decide(spec(target_drain_seconds=30), fresh, OLD)
    assert (d.desired, d.action) == (2, Action.SCALE_UP), d.reason


def test_two_idle_packed_workers_go_whatever_their_share_of_the_pool() -> None:
    """Twelve workers, two of them idle and kept empty by packing: they go at cost 0 in one step of two,
    although two is less than a fifth of the pool (one idle worker of ten still stays: see above)."""
    loads = (23, 23, 22, 22, 22, 22, 22, 22, 22, 22, 0, 0)
    later = replace(FRESH, last_change_at=NOW - 20, answers=((NOW - 20, 12),), answers_since=NOW - 20)
    big = obs(**(PACK | {"current_replicas": 12, "busy_workers": 10, "in_flight": 222, "worker_loads": loads}))
    d = decide(spec(poll_seconds=5, max_replicas=20), big, later)
    assert (d.desired, d.action) == (10, Action.SCALE_DOWN), d.reason
