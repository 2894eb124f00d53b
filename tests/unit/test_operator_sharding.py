"""Operator shards (trawl.operator.sharding): which objects a shard reconciles, its Lease, its field manager."""

from __future__ import annotations

from datetime import UTC, datetime

import kopf
import pytest

from trawl.api.cronscrapejob import CronScrapeJobSpec
from trawl.operator.cron.reconcile import build_job
from trawl.operator.sharding import SHARD_LABEL, Sharding, inherited_labels

pytestmark = pytest.mark.unit


def test_one_operator_reconciles_everything_a_shard_only_its_label_the_main_only_the_unlabelled() -> None:
    plain, labelled, other = {}, {SHARD_LABEL: "b"}, {SHARD_LABEL: "c"}
    alone, shard_b, main = Sharding(), Sharding(key="b"), Sharding(unsharded_only=True)
    assert [alone.owns(x) for x in (plain, labelled, other, None)] == [True, True, True, True]
    assert [shard_b.owns(x) for x in (plain, labelled, other, None)] == [False, True, False, False]
    assert [main.owns(x) for x in (plain, labelled, other, None)] == [True, False, False, True]
    # What kopf is given: no filter, the key, the label's absence.
    assert alone.handler_labels() is None
    assert shard_b.handler_labels() == {SHARD_LABEL: "b"}
    assert main.handler_labels() == {SHARD_LABEL: kopf.ABSENT}


def test_each_shard_has_its_own_lease_and_field_manager() -> None:
    assert (Sharding().lease_name("trawl-operator"), Sharding().field_manager) == ("trawl-operator", "trawl-operator")
    b = Sharding(key="b")
    assert (b.lease_name("trawl-operator"), b.field_manager) == ("trawl-operator-b", "trawl-operator-b")
    # The main operator keeps the names of a lone operator: adding shards moves nothing of its own.
    main = Sharding(unsharded_only=True)
    assert (main.lease_name("x"), main.field_manager) == ("x", "trawl-operator")


@pytest.mark.parametrize("key", ["", "-b", "b/c", "a" * 64, "b c"])
def test_a_shard_key_must_be_a_label_value(key: str) -> None:
    with pytest.raises(ValueError, match="not a label value"):
        Sharding(key=key)


def test_a_shard_is_not_also_the_main_operator() -> None:
    with pytest.raises(ValueError, match="unsharded-only"):
        Sharding(key="b", unsharded_only=True)


def test_a_cron_run_carries_its_cron_shard_over_its_template() -> None:
    spec = CronScrapeJobSpec.model_validate(
        {
            "schedule": "*/5 * * * *",
            "jobTemplate": {
                "metadata": {"labels": {SHARD_LABEL: "elsewhere", "team": "a"}},
                "spec": {"pool": "p", "urls": ["https://example.com/"]},
            },
        }
    )
    at = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    labels = build_job("c", "uid", spec, at, None, inherited_labels({SHARD_LABEL: "b"}))["metadata"]["labels"]
    assert labels[SHARD_LABEL] == "b" and labels["team"] == "a"
    # An unlabelled cron leaves the template's labels as they are.
    assert build_job("c", "uid", spec, at, None, inherited_labels({}))["metadata"]["labels"][SHARD_LABEL] == "elsewhere"
