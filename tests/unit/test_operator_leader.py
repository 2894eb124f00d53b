"""Leader election decisions (client-go's rules): expiry by the candidate's own clock, never by timestamps."""

from __future__ import annotations

from trawl.operator.leader import LeaseRecord, Observation, decide


def _rec(holder: str | None, renew: str | None = "t1", seconds: int = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, renew_time=renew, lease_seconds=seconds, transitions=0, resource_version="1")


def test_no_lease_is_created_and_our_own_is_renewed() -> None:
    assert decide(None, None, "me", 0.0) == "create"
    assert decide(_rec("me"), None, "me", 0.0) == "renew"


def test_a_released_lease_is_taken_at_once() -> None:
    assert decide(_rec(None), None, "me", 0.0) == "take"
    assert decide(_rec(""), None, "me", 0.0) == "take"


def test_another_holder_is_trusted_until_its_record_stands_still_for_the_lease_duration() -> None:
    record = _rec("other", "t1", 15)
    assert decide(record, None, "me", 100.0) == "wait"  # first sight: alive as of now
    seen = Observation("other", "t1", 100.0)
    assert decide(record, seen, "me", 114.9) == "wait"
    assert decide(record, seen, "me", 115.0) == "take"
    # A renewal (new renewTime) restarts the wait, whatever the timestamps say.
    assert decide(_rec("other", "t2", 15), seen, "me", 200.0) == "wait"
