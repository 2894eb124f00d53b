"""The operator's Secret index: what it keeps (labelled Secrets only), how pools resolve Redis settings from
it, and the version digest that rolls the workers when a Secret they read at start changes."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator.connections import resolve
from trawl.operator.secrets import (
    RedisConfigError,
    redis_secrets_version,
    secret_data,
    secret_index_entry,
    unseen_redis_secrets,
)

LABELLED = {"trawl.dev/secret": "true"}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _index(**secrets: tuple[dict[str, str], str]) -> dict[Any, list[dict[str, Any]]]:
    """A kopf-index-shaped mapping: (namespace, name) -> a store of values."""
    return {
        ("ns", name): [secret_index_entry("Opaque", {k: _b64(v) for k, v in data.items()}, rv, labels=LABELLED)]
        for name, (data, rv) in secrets.items()
    }


def _pool(**redis: Any) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0", **redis}})


def test_large_secret_types_are_kept_without_data_but_still_exist() -> None:
    helm = secret_index_entry("helm.sh/release.v1", {"release": "x" * 1000}, "7", labels=LABELLED)
    assert helm == {"data": {}, "version": "7"}
    assert secret_data({("ns", "h"): [helm]}, "ns", "h") == {}
    assert secret_data({}, "ns", "h") is None


def test_redis_settings_resolve_from_the_index() -> None:
    spec = _pool(passwordSecretRef={"name": "auth", "key": "password"})
    cfg = resolve("ns", spec, _index(auth=({"password": "s3cret"}, "1")))
    assert cfg.password == "s3cret"
    with pytest.raises(RedisConfigError, match="Secret ns/auth not found") as missing:
        resolve("ns", spec, {})
    # Missing or unlabelled, the operator cannot tell: the message gives the command that labels it.
    assert "kubectl label secret auth -n ns trawl.dev/secret=true" in str(missing.value)
    with pytest.raises(RedisConfigError, match="has no key 'password'"):
        resolve("ns", spec, _index(auth=({"other": "x"}, "1")))
    rotated = resolve("ns", spec, _index(auth=({"password": "n3w"}, "2")))
    assert rotated.fingerprint != cfg.fingerprint  # a new client, the old one closed


def test_the_version_digest_follows_the_referenced_secrets_only() -> None:
    assert redis_secrets_version(_index(), "ns", _pool()) is None  # no Secrets: the template never changes
    spec = _pool(passwordSecretRef={"name": "auth", "key": "password"})
    v1 = redis_secrets_version(_index(auth=({"password": "a"}, "1"), other=({}, "5")), "ns", spec)
    same = redis_secrets_version(_index(auth=({"password": "a"}, "1"), other=({}, "6")), "ns", spec)
    v2 = redis_secrets_version(_index(auth=({"password": "b"}, "2")), "ns", spec)
    assert v1 == same and v1 != v2
    # A metadata-only edit (new resourceVersion, same data) rolls nothing; a data change does.
    relabelled = redis_secrets_version(_index(auth=({"password": "a"}, "9")), "ns", spec)
    assert relabelled == v1
    assert redis_secrets_version({}, "ns", spec) not in (None, v1)  # missing: its own value


def test_a_secret_without_the_label_is_never_kept() -> None:
    """The watch selects labelled Secrets on the API server; should another come, its entry is None (the index
    function stores nothing for it), so neither its data nor its existence is in the index."""
    data = {"password": _b64("team-b's")}
    assert secret_index_entry("Opaque", data, "3", labels=None) is None
    assert secret_index_entry("Opaque", data, "3", labels={"app": "x"}) is None
    assert secret_index_entry("Opaque", data, "3", labels={"trawl.dev/secret": "yes"}) is None  # "true" only
    kept = secret_index_entry("Opaque", data, "3", labels={"trawl.dev/secret": "true", "app": "x"})
    assert kept is not None and kept["data"] == data


def test_a_pools_redis_secrets_out_of_sight_are_named() -> None:
    spec = _pool(
        urlSecretRef={"name": "url", "key": "url"}, url=None, passwordSecretRef={"name": "auth", "key": "password"}
    )
    assert unseen_redis_secrets(_index(auth=({"password": "a"}, "1")), "ns", spec) == ["url"]
    assert unseen_redis_secrets(_index(auth=({"password": "a"}, "1"), url=({"url": "x"}, "1")), "ns", spec) == []
    assert unseen_redis_secrets({}, "ns", _pool()) == []  # no Secrets
