"""The queue's key layout and payload parsing (pure)."""

from __future__ import annotations

import pytest

from trawl.queue.client import (
    ALLOW_OOM_SCRIPTS,
    SCRIPT_NAMES,
    _parse_task,
    load_script_source,
    policy_from_json,
    policy_to_json,
)
from trawl.queue.keys import Keys, hash_tag, pool_prefix
from trawl.queue.model import RetryPolicy


def test_pool_prefix_carries_the_hash_tag() -> None:
    prefix = pool_prefix("team-a", "pool-1")
    assert prefix == "trawl:{team-a/pool-1}"
    assert hash_tag(prefix) == "team-a/pool-1"
    for bad in (("", "p"), ("n", ""), ("a{b", "p"), ("n", "p}"), ("n", "a|b")):
        with pytest.raises(ValueError):
            pool_prefix(*bad)
    with pytest.raises(ValueError):
        hash_tag("trawl:{}")


def test_job_keys_cover_results_and_share_the_job_prefix() -> None:
    k = Keys("trawl:{n/p}")
    keys = k.job_keys("uid-1")
    assert k.results("uid-1") in keys and k.job("uid-1") in keys
    assert all(key.startswith("trawl:{n/p}:j:uid-1") for key in keys)
    assert len(set(keys)) == len(keys) == 9
    assert k.rate_limit("example.com").startswith("trawl:{n/p}:rl:")


def test_payload_parsing_keeps_pipes_in_urls() -> None:
    t = _parse_task("job", "42|2|1|3|https://x/a|b|c", 123.5)
    assert (t.task_id, t.attempt, t.depth, t.url, t.lease_deadline) == ("42", 3, 3, "https://x/a|b|c", 123.5)


def test_retry_policy_json_roundtrip() -> None:
    p = RetryPolicy(max_attempts=7, backoff="Fixed", retry_on=("Timeout",), honor_retry_after=False)
    assert policy_from_json(policy_to_json(p)) == p
    assert policy_from_json(None) == RetryPolicy()


def test_every_script_ships_with_the_shebang_and_declares_its_keys() -> None:
    for name in SCRIPT_NAMES:
        src = load_script_source(name)
        # Only the scripts that free memory may run on a full Redis (the remedies for it).
        assert src.startswith("#!lua flags=allow-oom\n" if name in ALLOW_OOM_SCRIPTS else "#!lua\n"), name
        assert "-- KEYS:" in src.split("\n", 1)[1], name
