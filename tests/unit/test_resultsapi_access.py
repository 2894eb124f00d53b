"""The results API's pure decisions: the RBAC each request needs, bearer tokens, cursors and limits, the
short caches of review answers and the per-caller rate limit (trawl.resultsapi.access, .kubeauth)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trawl.api.naming import GROUP
from trawl.clitools.resultsapi_client import bearer_from_configuration, dead_letter_record
from trawl.resultsapi.access import (
    MAX_LIMIT,
    Action,
    BadRequest,
    Identity,
    RateLimiter,
    TtlCache,
    bearer_token,
    front_proxy_identity,
    parse_cursor,
    parse_flag,
    parse_limit,
    peer_common_name,
    resource_attributes,
)
from trawl.resultsapi.kubeauth import identity_from_review, parse_front_proxy, review_body
from trawl.resultsapi.store import dead_letter_json
from trawl.sinks.redisstream import decode_entry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_action_needs_its_verb_on_its_subresource() -> None:
    assert resource_attributes(Action.READ_RESULTS, "team-a", "books") == {
        "namespace": "team-a", "verb": "get", "group": GROUP, "resource": "scrapejobs",
        "subresource": "results", "name": "books",
    }  # fmt: skip
    assert (Action.READ_DEAD_LETTERS.verb, Action.READ_DEAD_LETTERS.subresource) == ("get", "deadletters")
    assert (Action.RETRY_DEAD_LETTERS.verb, Action.RETRY_DEAD_LETTERS.subresource) == ("update", "deadletters")


def test_the_access_review_asks_about_the_caller_with_groups_uid_and_extra() -> None:
    who = Identity("alice", "u-1", ("team-a", "system:authenticated"), (("scopes", ("read",)),))
    spec = review_body(who, Action.RETRY_DEAD_LETTERS, "team-a", "books")["spec"]
    assert spec["user"] == "alice" and spec["uid"] == "u-1"
    assert spec["groups"] == ["team-a", "system:authenticated"] and spec["extra"] == {"scopes": ["read"]}
    assert spec["resourceAttributes"]["verb"] == "update"
    assert "uid" not in review_body(Identity("bob"), Action.READ_RESULTS, "n", "j")["spec"]


def test_only_an_authenticated_token_review_gives_an_identity() -> None:
    user = SimpleNamespace(username="alice", uid="u", groups=["g"], extra={"k": ["v"]})
    assert identity_from_review(SimpleNamespace(authenticated=True, user=user)) == Identity(
        "alice", "u", ("g",), (("k", ("v",)),)
    )
    assert identity_from_review(SimpleNamespace(authenticated=False, user=user)) is None
    assert identity_from_review(SimpleNamespace(authenticated=None, user=None)) is None
    assert identity_from_review(None) is None


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer  abc ", "abc"),
        (None, None),
        ("", None),
        ("Basic dXNlcjpwdw==", None),
        ("Bearer", None),
        ("Bearer a b", None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_a_cursor_is_a_stream_id_and_the_next_page_starts_after_it() -> None:
    assert parse_cursor(None) == "-" and parse_cursor("") == "-"
    assert parse_cursor("1700000000000-3") == "(1700000000000-3"
    for bad in ("-", "+", "(1-1", "1-1 ", "abc", "1", "1-1-1", "0x1-1", "9" * 21 + "-0"):
        with pytest.raises(BadRequest):
            parse_cursor(bad)


def test_limits_and_flags() -> None:
    assert parse_limit(None) == 1000 and parse_limit("1") == 1 and parse_limit(str(MAX_LIMIT)) == MAX_LIMIT
    for bad in ("0", "-1", str(MAX_LIMIT + 1), "ten", "1.5"):
        with pytest.raises(BadRequest):
            parse_limit(bad)
    assert parse_flag(None, "all") is False and parse_flag("true", "all") is True and parse_flag("0", "all") is False
    with pytest.raises(BadRequest):
        parse_flag("yes", "all")


def test_answers_are_kept_briefly_a_negative_one_too_and_the_cache_is_bounded() -> None:
    clock = Clock()
    cache: TtlCache[str, bool | None] = TtlCache(ttl=5, max_entries=3, clock=clock)
    cache.put("a", None)
    assert cache.lookup("a") == (True, None)
    assert cache.lookup("b") == (False, None)
    clock.now += 5
    assert cache.lookup("a") == (False, None)
    for key in "wxyz":
        cache.put(key, True)
    assert cache.lookup("w") == (False, None) and cache.lookup("z") == (True, True)


def test_the_rate_limit_is_per_caller_and_refills() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=2, burst=3, clock=clock)
    assert [limiter.allow("alice") for _ in range(3)] == [0, 0, 0]
    assert limiter.allow("alice") == pytest.approx(0.5)
    assert limiter.allow("bob") == 0  # another caller is not held back by alice
    clock.now += 0.5
    assert limiter.waiting("alice") == 0 and limiter.waiting("carol") == 0  # asking spends nothing
    assert limiter.allow("alice") == 0
    assert limiter.waiting("alice") == pytest.approx(0.5)


def test_stream_entries_and_dead_letters_round_trip_to_the_cli() -> None:
    assert decode_entry({b"data": b'{"title":"x"}', b"url": b"http://a/"}) == {"title": "x", "url": "http://a/"}
    assert decode_entry({"data": '{"url":"http://b/"}', "url": "http://a/"}) == {"url": "http://b/"}
    from trawl.queue.model import DeadLetterRecord

    record = DeadLetterRecord("t", "http://a/", 3, "HTTP5xx", "503", 1700000000.0, [{"attempt": 1}])
    back = dead_letter_record(dead_letter_json(record))
    assert (back.url, back.attempts, back.error_class, back.message, back.time, back.history) == (
        "http://a/", 3, "HTTP5xx", "503", 1700000000.0, [{"attempt": 1}],
    )  # fmt: skip


def test_the_cli_sends_the_kubeconfig_bearer_token_only() -> None:
    assert bearer_from_configuration(SimpleNamespace(api_key={"authorization": "Bearer t0k"})) == "t0k"
    assert bearer_from_configuration(SimpleNamespace(api_key={})) is None
    assert bearer_from_configuration(SimpleNamespace(api_key={"authorization": "Basic xyz"})) is None


FRONT_PROXY_CERT = {"subject": ((("organizationName", "x"),), (("commonName", "front-proxy-client"),))}


def test_only_a_verified_front_proxy_certificate_makes_the_remote_headers_count() -> None:
    headers = [
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "team-a"),
        ("x-remote-group", "system:authenticated"),
        ("X-Remote-Extra-Scopes%2Fa", "read"),
        ("X-Remote-User", "mallory"),  # a second user header: the first one counts, as in kube-apiserver
    ]
    assert peer_common_name(FRONT_PROXY_CERT) == "front-proxy-client"
    assert front_proxy_identity(FRONT_PROXY_CERT, ("front-proxy-client",), headers) == Identity(
        "alice", "", ("team-a", "system:authenticated"), (("scopes/a", ("read",)),)
    )
    assert front_proxy_identity(FRONT_PROXY_CERT, (), headers) is not None  # no allowed names: any verified one
    # no certificate (a direct caller forging the headers), another name, or no user header: no identity
    assert front_proxy_identity(None, ("front-proxy-client",), headers) is None
    assert front_proxy_identity({}, (), headers) is None
    assert front_proxy_identity(FRONT_PROXY_CERT, ("aggregator",), headers) is None
    assert front_proxy_identity(FRONT_PROXY_CERT, (), [("X-Remote-Group", "system:masters")]) is None


def test_the_front_proxy_settings_are_read_as_the_api_server_publishes_them() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    data = {"requestheader-client-ca-file": pem, "requestheader-allowed-names": '["front-proxy-client"]'}
    assert parse_front_proxy(data) == (pem, ("front-proxy-client",))
    assert parse_front_proxy({"requestheader-client-ca-file": pem}) == (pem, ())
    with pytest.raises(RuntimeError, match="requestheader-client-ca-file"):
        parse_front_proxy({"client-ca-file": pem})
