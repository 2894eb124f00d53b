"""What the operator's passes keep between runs (trawl.operator.memo): bounded, keyed by every input."""

from __future__ import annotations

import pytest

from trawl.operator.indexes import pool_entry, pool_from_index
from trawl.operator.memo import Memo, digest

pytestmark = pytest.mark.unit


def test_a_memo_computes_once_per_key_and_forgets_the_least_recently_used() -> None:
    memo: Memo[int] = Memo(2)
    calls: list[str] = []

    def make(key: str) -> int:
        calls.append(key)
        return len(calls)

    assert [memo.get(k, lambda k=k: make(k)) for k in ("a", "b", "a")] == [1, 2, 1]
    memo.get("c", lambda: make("c"))  # "b" was used least recently: it goes
    assert len(memo) == 2 and memo.get("b", lambda: make("b")) == 4 and calls == ["a", "b", "c", "b"]


def test_a_failure_is_not_kept() -> None:
    memo: Memo[int] = Memo(4)
    with pytest.raises(ValueError):
        memo.get("k", lambda: int("x"))
    assert memo.get("k", lambda: 7) == 7


def test_a_spec_digest_ignores_key_order_and_sees_every_value() -> None:
    assert digest({"a": 1, "b": [1, {"c": 2}]}) == digest({"b": [1, {"c": 2}], "a": 1})
    assert digest({"a": 1, "b": [1, {"c": 2}]}) != digest({"a": 1, "b": [1, {"c": 3}]})


def test_a_pool_spec_is_validated_once_per_generation_and_again_when_it_changes() -> None:
    redis = {"url": "redis://127.0.0.1:6379/0"}
    first = pool_from_index({("ns", "p"): [pool_entry({"redis": redis}, "uid-memo", {}, 3)]}, "ns", "p")
    again = pool_from_index({("ns", "p"): [pool_entry({"redis": redis}, "uid-memo", {}, 3)]}, "ns", "p")
    assert not isinstance(first, Exception) and not isinstance(again, Exception)
    assert again.spec is first.spec
    edited = {"redis": redis, "worker": {"concurrency": 7}}
    changed = pool_from_index({("ns", "p"): [pool_entry(edited, "uid-memo", {}, 4)]}, "ns", "p")
    assert not isinstance(changed, Exception) and changed.spec.worker.concurrency == 7
    # An entry without a generation (built before it was indexed) is validated every time, never kept.
    unknown = pool_from_index({("ns", "p"): [pool_entry(edited, "uid-memo", {})]}, "ns", "p")
    assert not isinstance(unknown, Exception) and unknown.spec is not changed.spec
