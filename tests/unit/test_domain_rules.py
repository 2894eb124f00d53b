"""Per-domain politeness rules: host patterns, which rule a host takes, how the pool's and the job's layers
combine, what admission refuses, what the worker and the job's status are given (pure;
tests/integration/test_worker_domain_rules.py runs them on real workers against real sites)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.domainrules import DomainRule, matches, most_specific
from trawl.api.scrapejob import ScrapeJobSpec, ScrapeJobStatus
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.jobspec.admission import browser_missing, limit_exceeded, spec_problem
from trawl.jobspec.domains import DomainRules, HostCache, effective_politeness, resolve_host
from trawl.jobspec.wire import build_worker_spec
from trawl.worker.jobsettings import parse_worker_spec

URLS = ["https://shop.example.com/a", "http://blog.example.com/b"]


def _job(politeness: dict[str, Any] | None = None, **spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "p", "urls": URLS, "politeness": politeness, **spec})


def _pool(rules: list[dict[str, Any]] | None = None, **spec: Any) -> ScrapePoolSpec:
    politeness: dict[str, Any] = {"requestsPerSecond": 4, "maxConcurrencyPerDomain": 8}
    if rules is not None:
        politeness["domains"] = rules
    redis = {"url": "redis://r:6379/0"}
    return ScrapePoolSpec.model_validate({"redis": redis, "defaults": {"politeness": politeness}, **spec})


def _rule(host: str, **fields: Any) -> DomainRule:
    return DomainRule.model_validate({"host": host, **fields})


# --- host patterns -----------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["shop.example.com", "*.example.com", "localhost", "127.0.0.2", "xn--bcher-kva.de"])
def test_host_patterns_that_are_accepted(host: str) -> None:
    assert _rule(host, requestsPerSecond=1).host == host


@pytest.mark.parametrize(
    ("host", "hint"),
    [
        ("Shop.Example.com", "did you mean 'shop.example.com'"),
        ("https://shop.example.com/x", "did you mean 'shop.example.com'"),
        ("shop.example.com:8080", "did you mean 'shop.example.com'"),
        ("bücher.de", "did you mean 'xn--bcher-kva.de'"),
        ("*example.com", ""),
        ("a.*.example.com", ""),
        ("*", ""),
        ("", ""),
    ],
)
def test_host_patterns_that_are_refused_say_what_to_write(host: str, hint: str) -> None:
    with pytest.raises(ValidationError) as exc:
        _rule(host, requestsPerSecond=1)
    assert hint in str(exc.value)


def test_a_rule_sets_its_rate_once_and_sets_something() -> None:
    with pytest.raises(ValidationError, match="requestsPerSecond or delaySeconds, not both"):
        _rule("a.example", requestsPerSecond=1, delaySeconds=2)
    with pytest.raises(ValidationError, match="sets nothing"):
        _rule("a.example")
    assert _rule("a.example", delaySeconds=4).rate() == 0.25


def test_a_host_pattern_is_listed_once_and_the_list_is_bounded() -> None:
    with pytest.raises(ValidationError, match="listed twice"):
        _job({"domains": [{"host": "a.example", "requestsPerSecond": 1}, {"host": "a.example", "delaySeconds": 1}]})
    with pytest.raises(ValidationError, match="at most 64"):
        _job({"domains": [{"host": f"h{i}.example", "requestsPerSecond": 1} for i in range(65)]})


def test_a_wildcard_matches_subdomains_at_any_depth_but_not_the_domain_itself() -> None:
    assert matches("*.example.com", "a.example.com")
    assert matches("*.example.com", "a.b.example.com")
    assert not matches("*.example.com", "example.com")
    assert not matches("*.example.com", "badexample.com")
    assert not matches("*.0.0.2", "127.0.0.2")  # an IP address is matched exactly or not at all
    assert matches("example.com", "example.com") and not matches("example.com", "a.example.com")


def test_the_most_specific_rule_wins_exact_over_wildcard_then_the_longer_suffix() -> None:
    rules = [_rule(h, requestsPerSecond=1) for h in ("*.com", "*.example.com", "*.shop.example.com", "a.example.com")]
    assert most_specific(rules, "a.example.com").host == "a.example.com"  # type: ignore[union-attr]
    assert most_specific(rules, "x.shop.example.com").host == "*.shop.example.com"  # type: ignore[union-attr]
    assert most_specific(rules, "b.example.com").host == "*.example.com"  # type: ignore[union-attr]
    assert most_specific(rules, "example.com").host == "*.com"  # type: ignore[union-attr]
    assert most_specific(rules, "example.org") is None


# --- resolution --------------------------------------------------------------------------------------


def _rules(pool: list[DomainRule], job: list[DomainRule], rate: float | None = None, conc: int | None = None) -> Any:
    return DomainRules(tuple(pool), tuple(job), rate, conc)


def test_a_host_no_rule_matches_keeps_the_base() -> None:
    got = resolve_host("other.org", 3.0, 6, _rules([_rule("a.example", requestsPerSecond=1)], []))
    assert (got.requests_per_second, got.max_concurrency_per_domain, got.pool_rule) == (3.0, 6, None)


def test_a_pool_rule_replaces_the_pools_defaults_and_the_jobs_looser_settings() -> None:
    pool = [_rule("*.example.com", requestsPerSecond=0.5, maxConcurrencyPerDomain=1)]
    got = resolve_host("shop.example.com", 10.0, 16, _rules(pool, [], rate=10.0, conc=16))
    assert (got.requests_per_second, got.max_concurrency_per_domain, got.pool_rule) == (0.5, 1, "*.example.com")


def test_a_jobs_stricter_settings_win_over_a_pool_rule() -> None:
    pool = [_rule("*.example.com", requestsPerSecond=5, maxConcurrencyPerDomain=4)]
    got = resolve_host("shop.example.com", 0.2, 1, _rules(pool, [], rate=0.2, conc=1))
    assert (got.requests_per_second, got.max_concurrency_per_domain) == (0.2, 1)


def test_a_job_rule_applies_where_the_pool_has_none_and_may_only_lower_a_pool_rule() -> None:
    pool = [_rule("shop.example.com", requestsPerSecond=2)]
    job = [_rule("*.example.com", delaySeconds=0.25, maxConcurrencyPerDomain=3)]  # 4 requests per second
    rules = _rules(pool, job)
    blog = resolve_host("blog.example.com", 1.0, 8, rules)
    assert (blog.requests_per_second, blog.max_concurrency_per_domain, blog.job_rule) == (4.0, 3, "*.example.com")
    shop = resolve_host("shop.example.com", 1.0, 8, rules)  # the pool rule's 2 holds against the job rule's 4
    assert (shop.requests_per_second, shop.max_concurrency_per_domain) == (2.0, 3)
    stricter = resolve_host("shop.example.com", 1.0, 8, _rules(pool, [_rule("shop.example.com", delaySeconds=2)]))
    assert stricter.requests_per_second == 0.5


def test_a_job_rule_overrides_the_jobs_own_setting_for_its_hosts() -> None:
    """The job's politeness is its default; its rule for a host is more specific (within jobLimits)."""
    rules = _rules([], [_rule("fast.example", requestsPerSecond=8)], rate=1.0)
    assert resolve_host("fast.example", 1.0, 4, rules).requests_per_second == 8.0


def test_the_host_cache_strips_the_port_and_stays_bounded() -> None:
    cache = HostCache(2.0, 4, _rules([_rule("a.example", requestsPerSecond=1)], []))
    assert cache.get("a.example:8443").requests_per_second == 1.0
    assert cache.get("A.EXAMPLE.").requests_per_second == 1.0
    for i in range(2000):
        cache.get(f"h{i}.example")
    assert len(cache._hosts) <= 1024
    assert HostCache(2.0, 4, None).get("a.example").requests_per_second == 2.0


# --- admission ---------------------------------------------------------------------------------------


def test_a_job_rule_above_the_pools_job_limits_is_refused() -> None:
    pool = _pool(jobLimits={"requestsPerSecond": 10, "maxConcurrencyPerDomain": 8})
    fast = _job({"domains": [{"host": "shop.example.com", "delaySeconds": 0.01}]})
    message = limit_exceeded(fast, pool)
    assert message is not None
    assert "spec.politeness.domains[0] (shop.example.com): delaySeconds 0.01 (100 requests per second)" in message
    assert "spec.jobLimits.requestsPerSecond" in message
    wide = _job({"domains": [{"host": "shop.example.com", "maxConcurrencyPerDomain": 9}]})
    assert "jobLimits.maxConcurrencyPerDomain" in (limit_exceeded(wide, pool) or "")


def test_a_job_rule_looser_than_the_pool_rule_covering_it_is_refused() -> None:
    pool = _pool([{"host": "*.example.com", "requestsPerSecond": 1, "maxConcurrencyPerDomain": 2}])
    for rule in (
        {"host": "shop.example.com", "requestsPerSecond": 2},
        {"host": "*.shop.example.com", "delaySeconds": 0.5},
        {"host": "*.example.com", "maxConcurrencyPerDomain": 3},
    ):
        message = limit_exceeded(_job({"domains": [rule]}), pool)
        assert message is not None and "looser than the pool's rule for *.example.com" in message, rule
    for rule in (
        {"host": "shop.example.com", "requestsPerSecond": 0.5, "maxConcurrencyPerDomain": 1},
        {"host": "example.com", "requestsPerSecond": 50},  # not below *.example.com: no pool rule covers it
        {"host": "*.com", "requestsPerSecond": 50},  # covers more than the pool rule: the pool rule holds there
    ):
        assert limit_exceeded(_job({"domains": [rule]}), pool) is None, rule


def test_a_pool_rule_stays_within_the_job_limits_its_author_set() -> None:
    with pytest.raises(ValidationError, match=r"domains\[0\] \(a.example\): requestsPerSecond 20 exceeds"):
        _pool([{"host": "a.example", "requestsPerSecond": 20}], jobLimits={"requestsPerSecond": 10})
    with pytest.raises(ValidationError, match="maxConcurrencyPerDomain 9 exceeds"):
        _pool([{"host": "a.example", "maxConcurrencyPerDomain": 9}], jobLimits={"maxConcurrencyPerDomain": 8})
    assert _pool([{"host": "a.example", "requestsPerSecond": 200}]).defaults is not None  # no ceiling set: allowed


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Bad Name": "x"}, "'Bad Name' is not a valid header name"),
        ({"X-Ok": "a\r\nInjected: 1"}, "CR, LF or NUL"),
    ],
)
def test_rule_headers_go_through_the_request_headers_checks(headers: dict[str, str], expected: str) -> None:
    spec = build_worker_spec(_job({"domains": [{"host": "shop.example.com", "headers": headers}]}), _pool())
    problem = spec_problem(spec)
    assert problem is not None and problem.startswith("spec.politeness.domains[0] (shop.example.com).headers[")
    assert expected in problem


# --- the worker's side and the job's status ------------------------------------------------------------


def test_the_worker_resolves_each_host_from_the_spec_it_is_given() -> None:
    pool = _pool([{"host": "*.example.com", "requestsPerSecond": 1, "maxConcurrencyPerDomain": 2}])
    job = _job({"requestsPerSecond": 3, "domains": [{"host": "shop.example.com", "delaySeconds": 2}]})
    spec = parse_worker_spec(build_worker_spec(job, pool))
    assert spec.host("shop.example.com:443") == (0.5, 2)
    assert spec.host("blog.example.com") == (1.0, 2)
    assert spec.host("other.org") == (3.0, 8)
    plain = parse_worker_spec(build_worker_spec(_job({"requestsPerSecond": 3}), _pool()))
    assert plain.hosts is None and plain.host("shop.example.com") == (3.0, 8)


def test_rule_headers_go_to_the_jobs_own_origins_of_matching_hosts_and_pool_rule_headers_win() -> None:
    pool = _pool([{"host": "*.example.com", "headers": {"From": "ops@platform.example", "X-Key": "secret"}}])
    job = _job(
        {"domains": [{"host": "shop.example.com", "headers": {"from": "me@team.example", "X-Team": "t"}}]},
        request={"headers": {"Accept-Language": "de"}},
    )
    scope = parse_worker_spec(build_worker_spec(job, pool)).headers
    assert scope is not None
    shop = scope.for_request("https://shop.example.com/a", "https://shop.example.com/a", 0)
    assert shop == {"Accept-Language": "de", "X-Team": "t", "From": "ops@platform.example", "X-Key": "secret"}
    # Over http the pool rule's headers stay home (neither is a harmless one), and the job rule is for shop only.
    blog = scope.for_request("http://blog.example.com/b", "http://blog.example.com/b", 0)
    assert blog == {"Accept-Language": "de"}
    assert scope.for_request("https://elsewhere.example.com/", "https://shop.example.com/a", 1) is None


def test_rule_headers_alone_make_a_scope_of_the_jobs_origins() -> None:
    job = _job({"domains": [{"host": "shop.example.com", "headers": {"X-Team": "t"}}]})
    scope = parse_worker_spec(build_worker_spec(job, None)).headers
    assert scope is not None
    assert scope.for_request("https://shop.example.com/x", "https://shop.example.com/a", 1) == {"X-Team": "t"}
    assert scope.for_request("http://blog.example.com/b", "http://blog.example.com/b", 0) is None


def test_the_status_shows_the_rules_as_they_apply_without_header_values() -> None:
    pool = _pool([{"host": "*.example.com", "requestsPerSecond": 1, "headers": {"X-Key": "secret"}}])
    job = _job({"domains": [{"host": "shop.example.com", "delaySeconds": 4, "maxConcurrencyPerDomain": 1}]})
    shown = effective_politeness(build_worker_spec(job, pool))
    assert shown == {
        "requestsPerSecond": 4.0,
        "maxConcurrencyPerDomain": 8,
        "domains": [
            {
                "host": "*.example.com",
                "requestsPerSecond": 1.0,
                "maxConcurrencyPerDomain": 8,
                "poolRule": "*.example.com",
                "headerNames": ["X-Key"],
            },
            {
                "host": "shop.example.com",
                "requestsPerSecond": 0.25,
                "maxConcurrencyPerDomain": 1,
                "poolRule": "*.example.com",
                "jobRule": "shop.example.com",
                "headerNames": ["X-Key"],
            },
        ],
    }
    assert "secret" not in str(shown)
    ScrapeJobStatus.model_validate({"politeness": shown})  # the CRD's status schema takes it


# --- render mode per domain --------------------------------------------------------------------------


def test_render_per_domain_a_pool_rule_wins_then_the_job_rule_then_the_jobs_render() -> None:
    browser_pool = _pool([{"host": "*.example.com", "render": "Browser"}], worker={"browser": {}})
    job = _job(
        {"domains": [{"host": "blog.example.com", "render": "Fetch"}, {"host": "shop.example.com", "render": "Fetch"}]}
    )
    spec = parse_worker_spec(build_worker_spec(job, browser_pool))
    # the pool's rule covers both hosts and wins over the job's Fetch
    assert spec.renders(URLS[0], "shop.example.com") and spec.renders(URLS[1], "blog.example.com")
    assert spec.render is not None and not spec.render.browser, "the job's settings, mode Fetch: rules decide"
    assert not spec.renders("https://other.test/x", "other.test"), "no rule: the job's render (none)"

    plain_pool = _pool([{"host": "shop.example.com", "requestsPerSecond": 1}], worker={"browser": {}})
    job = _job({"domains": [{"host": "blog.example.com", "render": "Fetch"}]}, render={"mode": "Browser"})
    spec = parse_worker_spec(build_worker_spec(job, plain_pool))
    assert spec.renders(URLS[0], "shop.example.com"), "a pool rule without render keeps the job's"
    assert not spec.renders(URLS[1], "blog.example.com"), "the job's rule fetches its host plainly"
    status = effective_politeness(build_worker_spec(job, plain_pool))
    assert [d.get("render") for d in status["domains"]] == ["Fetch", None]


def test_a_rule_that_renders_needs_a_pool_with_browser_workers() -> None:
    job = _job({"domains": [{"host": "shop.example.com", "render": "Browser"}]})
    problem = browser_missing(job, _pool())
    assert problem is not None and "a domain rule's render" in problem and "spec.worker.browser" in problem
    assert browser_missing(job, _pool(worker={"browser": {}})) is None
    pool_renders = _pool([{"host": "*.example.com", "render": "Browser"}])
    problem = browser_missing(_job(), pool_renders)
    assert problem is not None and "a domain rule's render" in problem
    assert parse_worker_spec(build_worker_spec(_job(), _pool())).render is None, "nothing renders: none sent"


def test_a_rule_may_set_only_its_render() -> None:
    assert _rule("shop.example.com", render="Browser").render == "Browser"
    with pytest.raises(ValidationError, match="headers or render"):
        _rule("shop.example.com")
