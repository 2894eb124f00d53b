"""A pool's status tells a Redis that lost its data (another data epoch than it last saw), once, and keeps
the condition."""

from __future__ import annotations

from datetime import UTC, datetime

from trawl.operator.conditions import is_true
from trawl.operator.pool.status import finish_pass, pool_data_lost

NOW = datetime(2026, 11, 26, 7, 0, tzinfo=UTC)


def test_pool_data_lost_is_told_once_and_stays() -> None:
    assert pool_data_lost({}, "e1") is None  # first sight: nothing to compare with
    assert pool_data_lost({"queueEpoch": "e1"}, "e1") is None
    lost = pool_data_lost({"queueEpoch": "e1"}, "e2")
    assert lost is not None and "lost its data" in lost
    first = finish_pass({"queueEpoch": "e2"}, {"queueEpoch": "e1"}, 1, NOW, [], data_lost=lost)
    assert is_true(first.status["conditions"], "DataLost")
    again = finish_pass({"queueEpoch": "e2"}, first.status, 1, NOW, [], data_lost=pool_data_lost(first.status, "e2"))
    assert is_true(again.status["conditions"], "DataLost") and again.events == []
