"""`trawl secret ensure` decides from the Secret as it is: create it with random values once, then keep every
value it holds and add only what is missing (the chart's hook for the bundled Redis's password)."""

from __future__ import annotations

import pytest

from trawl.clitools.exits import CliError
from trawl.clitools.secretensure import ALPHABET, Existing, fill, parse_pairs, plan, random_value

URL = {"url": "redis://:{password}@trawl-redis.ns.svc:6379/0"}
LABELS = {"trawl.dev/secret": "true", "app.kubernetes.io/component": "redis"}


def test_an_absent_secret_is_created_with_a_random_value_and_what_derives_from_it() -> None:
    made = plan(None, ["password"], URL, LABELS, make_random=lambda: "Abc123")
    assert made.action == "create"
    assert made.data == {"password": "Abc123", "url": "redis://:Abc123@trawl-redis.ns.svc:6379/0"}
    assert made.labels == LABELS


def test_an_existing_secret_keeps_every_value_it_holds() -> None:
    """A second install, an upgrade, every Argo CD sync: the same password, whatever the chart asks."""
    held = Existing({"password": "old", "url": "redis://:old@host:6379/0"}, dict(LABELS))
    assert plan(held, ["password"], URL, LABELS, make_random=lambda: "new").action == "keep"


def test_only_what_is_missing_is_added() -> None:
    # The Secret an older chart rendered: no label; its password stays, the label is added.
    unlabelled = Existing({"password": "old", "url": "redis://:old@host:6379/0"}, {"helm.sh/chart": "trawl-0.1.0"})
    update = plan(unlabelled, ["password"], URL, LABELS, make_random=lambda: "new")
    assert update.action == "update" and update.data == {} and update.labels == LABELS
    # A URL missing: made from the password the Secret holds (percent-encoded in the URL).
    no_url = Existing({"password": "p@ss/word"}, dict(LABELS))
    update = plan(no_url, ["password"], URL, LABELS)
    assert update.data == {"url": "redis://:p%40ss%2Fword@trawl-redis.ns.svc:6379/0"} and update.labels == {}


def test_random_values_are_32_letters_and_digits_and_differ() -> None:
    values = {random_value() for _ in range(20)}
    assert len(values) == 20
    assert all(len(v) == 32 and set(v) <= set(ALPHABET) for v in values)


def test_bad_arguments_are_one_clear_error() -> None:
    with pytest.raises(CliError, match="names 'token'"):
        fill("redis://:{token}@host", {"password": "x"})
    with pytest.raises(CliError, match="is not KEY=VALUE"):
        parse_pairs(["no-equals-sign"], "--label")
    assert parse_pairs(["url=redis://:{password}@h:6379/0?a=b"], "--derived") == {
        "url": "redis://:{password}@h:6379/0?a=b"
    }
