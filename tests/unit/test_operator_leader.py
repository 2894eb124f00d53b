"""Leader election decisions: expiry counted from the leader's renewal, backdated only within bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trawl.operator.leader import LeaseRecord, Observation, decide, observe

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
