"""Leader election decisions: expiry counted from the leader's renewal, backdated only within bounds; the
leader's fence (it acts only until renew_deadline after the newest renewal its event loop confirmed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trawl.operator.leader import (
    LeaseRecord,
    Observation,
    Renewals,
    acting_deadline,
    breach,
    decide,
    next_renewal,
    observe,
)

WALL = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _micro(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rec(holder: str | None, renew: str | None = "t1", seconds: int = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, renew_time=renew, lease_seconds=seconds, transitions=0, resource_version="1")


def test_no_lease_is_created_and_our_own_is_renewed() -> None:
    assert decide(None, None, "me", 0.0) == "create"
    assert decide(_rec("me"), None, "me", 0.0) == "renew"


def test_a_released_lease_is_taken_at_once() -> None:
    assert decide(_rec(None), None, "me", 0.0) == "take"
    assert decide(_rec(""), None, "me", 0.0) == "take"


def test_another_holder_is_trusted_until_its_lease_from_the_observed_renewal_runs_out() -> None:
    record = _rec("other", "t1", 15)
    assert decide(record, None, "me", 100.0) == "wait"  # never seen: read it first
    seen = Observation("other", "t1", 100.0)
    assert decide(record, seen, "me", 114.9) == "wait"
    assert decide(record, seen, "me", 115.0) == "take"
    # A renewal (new renewTime) needs a new observation: the old one does not apply to it.
    assert decide(_rec("other", "t2", 15), seen, "me", 200.0) == "wait"


def test_a_renewal_read_late_counts_from_its_renew_time() -> None:
    """Read 1.5 s after the leader wrote it: the lease runs out 1.5 s earlier than by the reader's clock
    alone (client-go's rule), i.e. exactly leaseDurationSeconds after the renewal."""
    record = _rec("other", _micro(WALL - timedelta(seconds=1.5)), 15)
    seen = observe(record, None, 100.0, WALL, max_backdate=5.0)
    assert seen.renewed_at == 98.5
    assert decide(record, seen, "me", 113.4) == "wait"
    assert decide(record, seen, "me", 113.5) == "take"
    # Re-reading the same record keeps the first observation.
    assert observe(record, seen, 104.0, WALL + timedelta(seconds=4), max_backdate=5.0) is seen


def test_the_leaders_clock_is_trusted_only_within_the_bound() -> None:
    # A leader clock far behind (or a Lease renewed long ago) backdates by the bound only, so the
    # reader still waits renew_deadline (= lease - bound) from its own sight of the record.
    old = _rec("other", _micro(WALL - timedelta(hours=1)), 15)
    assert observe(old, None, 100.0, WALL, max_backdate=5.0).renewed_at == 95.0
    # A leader clock ahead of ours counts as a renewal seen right now.
    ahead = _rec("other", _micro(WALL + timedelta(seconds=30)), 15)
    assert observe(ahead, None, 100.0, WALL, max_backdate=5.0).renewed_at == 100.0
    # No or unparseable renewTime: from our sight.
    assert observe(_rec("other", None), None, 100.0, WALL, max_backdate=5.0).renewed_at == 100.0
    assert observe(_rec("other", "garbage"), None, 100.0, WALL, max_backdate=5.0).renewed_at == 100.0


def test_the_leader_acts_until_renew_deadline_after_the_renewal_its_loop_confirmed() -> None:
    confirmed = Renewals(sent=100.0, confirmed=100.0)
    assert acting_deadline(confirmed, 10.0) == 110.0
    assert breach(confirmed, 109.99, 10.0) is None
    assert breach(confirmed, 110.0, 10.0) == "renewal"  # no newer renewal succeeded
    # A renewal sent at 105 succeeded but the loop never confirmed it: it does not move the deadline
    # (a stalled loop cannot show it still acts as the holder), and the reason names the loop.
    unconfirmed = Renewals(sent=105.0, confirmed=100.0)
    assert acting_deadline(unconfirmed, 10.0) == 110.0
    assert breach(unconfirmed, 110.0, 10.0) == "loop"
    # The deadline comes before any standby may take: one takes no earlier than renew_deadline after its
    # own sight of the renewal, which comes after the leader sent it.
    assert acting_deadline(Renewals(sent=105.0, confirmed=105.0), 10.0) == 115.0


def test_renewals_wait_for_the_loop_and_failures_retry_sooner() -> None:
    assert next_renewal(Renewals(100.0, 100.0), renew_seconds=5.0, retry_seconds=2.0) == 105.0
    # The loop has not confirmed the newest renewal: no more until it does (the watchdog stops the
    # process at the deadline; renewing for a stalled loop would only keep the Lease from a standby).
    assert next_renewal(Renewals(105.0, 100.0), renew_seconds=5.0, retry_seconds=2.0) is None
    # A failed attempt is retried a retry period after it failed.
    assert next_renewal(Renewals(100.0, 100.0, failed_at=106.5), renew_seconds=5.0, retry_seconds=2.0) == 108.5
