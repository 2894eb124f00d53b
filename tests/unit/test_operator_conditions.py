"""The one condition builder (trawl.operator.conditions): the Ready/Stalled/Reconciling triple every kind
writes, the one rule for a Warning on a new Stalled reason, and a wire form in the API's Condition shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trawl.api.common import Condition
from trawl.operator.conditions import (
    Cond,
    ConditionType,
    at_rest,
    healthy,
    merge_conditions,
    progressing,
    redis_data_lost,
    stalled,
    warn_if_new,
)
from trawl.operator.events import Transition
from trawl.operator.problems import Problem

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _triple(conds: tuple[Cond, ...]) -> list[tuple[str, bool | None, str, str]]:
    return [(c.type.value, c.status, c.reason, c.message) for c in conds]


def test_the_triple_in_each_of_its_states() -> None:
    assert _triple(stalled("PoolNotFound", "no pool")) == [
        ("Ready", False, "PoolNotFound", "no pool"),
        ("Stalled", True, "PoolNotFound", "no pool"),
        ("Reconciling", False, "PoolNotFound", ""),
    ]
    assert _triple(healthy("Scheduled", "2 active jobs")) == [
        ("Ready", True, "Scheduled", "2 active jobs"),
        ("Stalled", False, "Reconciled", ""),
        ("Reconciling", False, "Reconciled", ""),
    ]
    assert _triple(progressing("Running", "working")) == [
        ("Ready", False, "Running", "working"),
        ("Stalled", False, "Reconciled", ""),
        ("Reconciling", True, "Running", "working"),
    ]
    assert _triple(progressing("Scaling", "1/2 workers ready", ready=True))[0] == (
        "Ready",
        True,
        "Scaling",
        "1/2 workers ready",
    )
    # At rest by request (suspended): settled, so Ready=True (kstatus's Ready fallback reads False as InProgress).
    assert _triple(at_rest("Suspended", "spec.suspend is true")) == [
        ("Ready", True, "Suspended", "spec.suspend is true"),
        ("Stalled", False, "Reconciled", ""),
        ("Reconciling", False, "Suspended", ""),
    ]
    done = healthy("Succeeded", "3 of 3", settled="Succeeded", stalled_by=Problem("PoolNotFound", "gone"))
    assert _triple(done)[1:] == [("Stalled", True, "PoolNotFound", "gone"), ("Reconciling", False, "Succeeded", "")]


def test_a_warning_only_when_the_stalled_reason_is_new() -> None:
    first = merge_conditions(None, list(stalled("RedisUnavailable", "down")), generation=1, now=NOW)
    assert warn_if_new(None, ConditionType.STALLED, "RedisUnavailable", "down") == [
        Transition("Warning", "RedisUnavailable", "down")
    ]
    assert warn_if_new(first, ConditionType.STALLED, "RedisUnavailable", "still down") == []
    assert [e.reason for e in warn_if_new(first, ConditionType.STALLED, "InvalidSpec", "x")] == ["InvalidSpec"]
    recovered = merge_conditions(first, list(healthy("Scheduled", "ok")), generation=1, now=NOW)
    assert [e.reason for e in warn_if_new(recovered, ConditionType.STALLED, "RedisUnavailable", "again")] == [
        "RedisUnavailable"
    ]


def test_the_wire_form_is_the_api_condition_and_keeps_transition_times() -> None:
    wanted = [*stalled("RedisUnavailable", "down"), redis_data_lost("lost")]
    first = merge_conditions([{"type": "Custom", "status": "True", "reason": "Kept"}], wanted, generation=3, now=NOW)
    for cond in first[:-1]:
        Condition.model_validate(cond)
    assert first[-1] == {"type": "Custom", "status": "True", "reason": "Kept"}  # another writer's condition stays
    later = NOW + timedelta(minutes=5)
    again = merge_conditions(first, [*stalled("RedisUnavailable", "still down")], generation=4, now=later)
    by_type = {c["type"]: c for c in again}
    assert by_type["Stalled"]["lastTransitionTime"] == "2026-11-27T12:00:00Z"  # no flip: since when it is stalled
    assert by_type["Stalled"]["observedGeneration"] == 4 and by_type["DataLost"]["status"] == "True"
    flipped = merge_conditions(again, [*healthy("Scheduled", "ok")], generation=4, now=later)
    assert {c["type"]: c for c in flipped}["Stalled"]["lastTransitionTime"] == "2026-11-27T12:05:00Z"
