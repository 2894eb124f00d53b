"""trawl.worker.politeness.backlog: which of a domain's tasks a worker keeps waiting, and when it gives the
others back (issue 37: no head-of-line blocking)."""

from __future__ import annotations

import pytest

from trawl.worker.politeness.backlog import MIN_DEFER, ON_DECK_SECONDS, PARK_SECONDS, Backlog, keeps, start_wait


def test_a_task_of_a_domain_with_a_free_slot_and_no_recent_token_starts_at_once() -> None:
    assert start_wait(0, 0, 2, 0.5, None) == 0.0
    assert keeps(start_wait(1, 0, 2, 0.5, None))


def test_every_slot_held_here_means_no_estimate_and_the_task_goes_back() -> None:
    assert start_wait(2, 0, 2, 0.5, None) is None  # how long a slot is held is not known yet
    assert not keeps(None) and keeps(None, first_in_line=True)  # one on deck until it is known


def test_with_every_slot_held_the_wait_is_the_slots() -> None:
    # 2 slots held 0.3 s each: the next task starts in ~0.15 s, the one after it in ~0.3 s.
    assert start_wait(2, 0, 2, 0.25, None, 0.3) == pytest.approx(0.15)
    assert start_wait(3, 0, 2, 0.25, None, 0.3) == pytest.approx(0.3)
    assert keeps(0.15) and not keeps(0.3) and keeps(0.3, first_in_line=True)
    assert not keeps(start_wait(2, 0, 2, 0.5, None, 3.0), first_in_line=True)  # a slow site: 1.5 s


def test_the_wait_counts_the_next_token_and_the_tasks_already_waiting_for_one() -> None:
    # 2 s between tokens, the last one 0.5 s ago, one task already waiting: 1.5 + 2 s.
    assert start_wait(0, 1, 4, 2.0, 0.5) == pytest.approx(3.5)
    assert not keeps(3.5)
    assert keeps(PARK_SECONDS)


def test_one_task_per_domain_waits_on_deck_for_its_next_token() -> None:
    assert keeps(ON_DECK_SECONDS, first_in_line=True)  # none other waits: this one keeps the host at its rate
    assert not keeps(ON_DECK_SECONDS)  # another is on deck already
    assert not keeps(ON_DECK_SECONDS + 0.5, first_in_line=True)  # a slow rate: given back until its turn


def test_no_rate_to_wait_for_keeps_every_task_with_a_slot() -> None:
    assert start_wait(999, 50, 1000, 0.0, 0.0) == 0.0


def test_deferred_tasks_of_a_domain_come_back_one_interval_apart() -> None:
    backlog = Backlog()
    delays = [backlog.defer(1.0, 2.0, 100.0) for _ in range(3)]
    assert delays == pytest.approx([1.0, 3.0, 5.0])


def test_a_deferral_is_never_shorter_than_the_minimum() -> None:
    assert Backlog().defer(0.0, 0.01, 100.0) == MIN_DEFER


def test_an_unknown_wait_defers_by_an_interval_and_at_least_the_minimum() -> None:
    backlog = Backlog()
    assert backlog.defer(None, 0.1, 100.0) == MIN_DEFER
    assert backlog.defer(None, 0.1, 100.0) == pytest.approx(2 * MIN_DEFER)
