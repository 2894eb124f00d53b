"""Sessions, pure parts: the cookie jar (RFC 6265 scoping through http.cookiejar, bounded, round trip through
its stored form and a browser's), the block rules, which session a request takes, and the proxy a session
keeps (pinned) or avoids (cooling down)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.api.sessions import BlockRules, SessionSpec
from trawl.jobspec.admission import unknown_proxy_group, unknown_session_seed
from trawl.jobspec.wire import build_worker_spec
from trawl.worker.bans import BodySizes, collapsed, failure_blocked, response_blocked
from trawl.worker.cookies import MAX_COOKIES, MAX_JAR_BYTES, SessionJar
from trawl.worker.fetch import with_cookies
from trawl.worker.jobsettings import parse_worker_spec
from trawl.worker.proxies import pick
from trawl.worker.sessions import choose, live


def _sent(jar: SessionJar, url: str) -> set[str]:
    return set((jar.header_for(url) or "").split("; ")) - {""}


def test_a_cookie_is_sent_only_where_its_scope_matches() -> None:
    jar = SessionJar()
    jar.store(
        "http://a.example/shop/x",
        [
            "host=1; Path=/",
            "dom=2; Domain=a.example; Path=/",
            "sec=3; Secure; Path=/",
            "other=4; Domain=b.example",
            "tld=5; Domain=example",
            "path=6",
        ],
    )
    assert _sent(jar, "http://a.example/") == {"host=1", "dom=2"}
    assert _sent(jar, "https://a.example/") == {"host=1", "dom=2", "sec=3"}  # Secure: over https only
    assert _sent(jar, "http://a.example/shop/y") == {"host=1", "dom=2", "path=6"}  # its default path
    assert jar.header_for("http://b.example/") is None  # a cookie of a.example never goes to b.example
    assert jar.header_for("http://c.example/") is None  # nor one that named a parent domain
    assert jar.header_for("http://x.a.example/") == "dom=2"  # host-only stays on its host
    assert jar.header_for("http://a.example.evil/") is None


def test_the_stored_form_round_trips_with_its_scope() -> None:
    jar = SessionJar()
    jar.store("http://a.example/", ["host=1", "dom=2; Domain=a.example", "gone=3; Max-Age=0"])
    assert jar.changed
    again = SessionJar(jar.dump())
    assert _sent(again, "http://a.example/") == {"host=1", "dom=2"}
    assert again.header_for("http://x.a.example/") == "dom=2"
    assert again.header_for("http://b.example/") is None
    assert SessionJar([{"name": "broken"}, {"not": "a cookie"}]).cookies() == []  # a bad entry costs itself


def test_the_jar_is_bounded() -> None:
    jar = SessionJar()
    jar.store("http://a.example/", [f"c{i}={'v' * 100}" for i in range(200)] + ["huge=" + "x" * 5000])
    kept = jar.dump()
    assert len(kept) <= MAX_COOKIES and len(str(kept)) < 2 * MAX_JAR_BYTES
    assert jar.dropped >= 200 - MAX_COOKIES + 1
    assert all(c["name"] != "huge" for c in kept)


def test_browser_cookies_round_trip() -> None:
    jar = SessionJar()
    jar.store("http://localhost:8080/", ["host=1"])
    jar.store("http://a.example/", ["dom=2; Domain=a.example"])
    shown = {c["name"]: c for c in jar.for_browser()}
    assert shown["host"]["domain"] == "localhost" and shown["dom"]["domain"] == ".a.example"
    other = SessionJar()
    other.take_browser(
        [*shown.values(), {"name": "js", "value": "3", "domain": "a.example", "path": "/", "expires": -1}]
    )
    assert other.header_for("http://localhost:9/") == "host=1"
    assert other.header_for("http://x.a.example/") == "dom=2"  # a domain cookie
    assert "js=3" in (other.header_for("http://a.example/") or "") and other.changed


def test_a_session_cookie_joins_the_jobs_own_cookie_header() -> None:
    assert with_cookies({"Accept": "x"}, None) == {"Accept": "x"}
    assert with_cookies({"cookie": "mine=1"}, "sid=2") == {"Cookie": "mine=1; sid=2"}


RULES = BlockRules(
    statusCodes=[403, 429], markers=["Solve the CAPTCHA"], challengePaths=["/captcha"], minBodyFraction=0.2
)


@pytest.mark.parametrize(
    ("status", "final", "redirects", "body", "blocked"),
    [
        (200, "http://a.example/p", [], b"<h1>fine</h1>" + b"." * 500, None),
        (200, "http://a.example/p", [], b"<p>please solve the captcha</p>", "marker"),
        (200, "http://a.example/captcha?r=1", ["http://a.example/captcha?r=1"], b"ok", "challenge"),
        (200, "http://a.example/p", [], b"x" * 10, "collapsed"),
    ],
)
def test_a_response_is_blocked_by_the_rules(
    status: int, final: str, redirects: list[str], body: bytes, blocked: str | None
) -> None:
    reason = response_blocked(status, "http://a.example/p", final, redirects, body, RULES, [1000] * 5)
    assert (
        (reason is None)
        if blocked is None
        else (reason is not None and blocked in reason.replace("redirected to ", ""))
    ), reason


def test_failures_and_collapse_need_their_evidence() -> None:
    assert failure_blocked(403, "http://a.example/", RULES) == "HTTP 403"
    assert failure_blocked(404, "http://a.example/", RULES) is None
    assert failure_blocked(404, "http://a.example/captcha", RULES) is not None
    assert collapsed(10, [1000] * 4, 0.5) is None  # too few pages known
    assert collapsed(10, [1000] * 5, 0.0) is None  # off
    sizes = BodySizes()
    for _ in range(30):
        sizes.observe("j", "a.example", 500)
    assert len(sizes.typical("j", "a.example")) == 20 and sizes.typical("j", "b.example") == []


def test_which_session_a_request_takes() -> None:
    import random

    rng = random.Random(1)
    assert choose([], 3, rng) is None and choose(["a", "b"], 3, rng) is None  # room: a new one
    assert choose(["a", "b", "c"], 3, rng) in {"a", "b", "c"}
    spec = SessionSpec(maxAgeSeconds=60, maxUses=2)
    assert live({"created": 1000.0}, 1, spec, 1059.0)
    assert not live({"created": 1000.0}, 1, spec, 1060.0) and not live({"created": 1000.0}, 2, spec, 1001.0)


def test_a_session_keeps_its_proxy_and_a_new_one_avoids_cooling_ones() -> None:
    assert pick([0, 0, 0], 2, 0, prefer=1, strict=True) == 1
    assert pick([0, 2, 0], 2, 0, prefer=1, strict=True) is None  # waits for its own proxy
    assert pick([0, 2, 0], 2, 0, prefer=1) == 0  # not strict: the least busy
    assert pick([0, 0, 1], 2, 0, avoid=frozenset({0, 1})) == 2  # busier, but not cooling
    assert pick([0, 0], 2, 0, avoid=frozenset({0, 1})) == 0  # all cooling: still one


def test_the_session_spec_is_bounded_and_reaches_the_worker() -> None:
    for bad in (
        {"poolSize": 51},
        {"maxUses": 0},
        {"block": {"challengePaths": ["captcha"]}},
        {"block": {"markers": [""]}},
    ):
        with pytest.raises(ValidationError):
            SessionSpec.model_validate(bad)
    job = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://a.example/"], "session": {"scope": "Domain"}})
    parsed = parse_worker_spec(build_worker_spec(job, None))
    assert (
        parsed.session is not None
        and parsed.session.scope.value == "Domain"
        and parsed.session.block.status_codes == [403]
    )
    plain = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://a.example/"]})
    assert parse_worker_spec(build_worker_spec(plain, None)).session is None


def test_blocks_are_on_the_jobs_status() -> None:
    from datetime import UTC, datetime

    from trawl.api.scrapejob import ScrapeJobStatus
    from trawl.operator.job.status import JobFacts, derive_job_status
    from trawl.queue.model import JobStats

    now = datetime(2026, 11, 28, 12, tzinfo=UTC)
    stats = JobStats(10, 5, 1, 0, 4, 0, True, False, now.timestamp() - 5)
    facts = JobFacts(generation=1, suspend=False, stats=stats, blocked=(7, [("a.example", 5), ("b.example:8080", 2)]))
    status, _ = derive_job_status(facts, {"phase": "Running"}, now)
    assert status["counts"]["blocked"] == 7
    assert status["blockedDomains"] == [
        {"domain": "a.example", "blocked": 5},
        {"domain": "b.example:8080", "blocked": 2},
    ]
    ScrapeJobStatus.model_validate(status)  # the CRD's schema accepts it
    quiet, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats), {"phase": "Running"}, now)
    assert "blocked" not in quiet["counts"] and "blockedDomains" not in quiet


def _pool_with_groups(rules: list[dict[str, object]] | None = None) -> ScrapePoolSpec:
    groups = [
        {"name": "dc", "secretRef": {"name": "px", "key": "dc"}, "default": True},
        {"name": "resi", "secretRef": {"name": "px", "key": "resi"}},
    ]
    return ScrapePoolSpec.model_validate(
        {
            "redis": {"url": "redis://r:6379/0"},
            "worker": {"secrets": ["px"]},
            "proxies": {"groups": groups},
            "defaults": {"politeness": {"domains": rules or []}},
        }
    )


def test_a_domain_rule_routes_its_hosts_through_a_group() -> None:
    pool = _pool_with_groups([{"host": "*.shop.example", "proxyGroup": "resi"}])
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": ["https://a.example/"],
            "politeness": {
                "domains": [
                    {"host": "direct.example", "proxyGroup": "none"},
                    {"host": "x.shop.example", "proxyGroup": "none"},  # a pool rule's group wins
                ]
            },
        }
    )
    assert unknown_proxy_group(job, pool) is None
    spec = parse_worker_spec(build_worker_spec(job, pool))
    assert spec.proxy_for("a.example")["group"] == "dc"  # type: ignore[index]  # the pool's default
    assert spec.proxy_for("x.shop.example:8443")["group"] == "resi"  # type: ignore[index]
    assert spec.proxy_for("direct.example") is None
    routes = build_worker_spec(job, pool)["proxy_groups"]
    resi = {"group": "resi", "secret": {"name": "px", "key": "resi"}, "max_per_proxy": 8}
    assert routes == {"none": None, "resi": resi}  # references to the pool's Secret, never a proxy URL


def test_a_rule_naming_a_group_the_pool_lacks_is_refused() -> None:
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": ["https://a.example/"],
            "politeness": {"domains": [{"host": "a.example", "proxyGroup": "mine"}]},
        }
    )
    problem = unknown_proxy_group(job, _pool_with_groups())
    assert problem is not None and "'mine'" in problem and "proxyGroup" in problem
    with pytest.raises(ValidationError, match="proxyGroup"):
        _pool_with_groups([{"host": "a.example", "proxyGroup": "nope"}])


def test_the_proxy_summary_shows_use_and_health_by_host_and_port() -> None:
    from trawl.api.proxies import ProxyStatus
    from trawl.queue.proxyusage import summary

    raw = {
        b"dc|10.0.0.1:3128|ok": b"7",
        b"dc|10.0.0.1:3128|blk": b"2",
        b"dc|10.0.0.1:3128|last": b'{"outcome": "blocked", "time": 1764331200.5}',
        b"dc|[::1]:1080|fail": b"3",
        b"dc|[::1]:1080|last": b'{"outcome": "proxy_error", "time": 1764331201}',
        b"resi|10.0.0.9:8080|ok": b"4",
        b"garbage": b"1",
        b"dc|x:1|last": b"not json",
    }
    rows = {r["proxy"]: r for r in summary(raw)}
    assert rows["10.0.0.1:3128"] | {} == {
        "group": "dc", "proxy": "10.0.0.1:3128", "requests": 9, "ok": 7, "failed": 0, "blocked": 2,
        "health": "Blocked", "lastOutcome": "blocked", "lastTime": "2025-11-28T12:00:00Z",
    }  # fmt: skip
    assert rows["[::1]:1080"]["health"] == "Failing" and rows["10.0.0.9:8080"]["health"] == "Healthy"
    assert list(rows)[-1] == "10.0.0.9:8080"  # the unhealthy first
    for row in rows.values():
        ProxyStatus.model_validate(row)


def test_a_seed_is_read_as_its_urls_responses_would_set_it() -> None:
    from trawl.worker.seeds import parse_seed

    text = (
        "# a login\nhttps://a.example/ sid=1; Path=/; Secure\n\nnot-a-url x=1\n"
        "https://a.example/ evil=2; Domain=b.example\nftp://a.example/ f=1\n"
    )
    seed = parse_seed(text)
    assert seed == [
        ("https://a.example/", "sid=1; Path=/; Secure"),
        ("https://a.example/", "evil=2; Domain=b.example"),
    ]
    jar = SessionJar()
    for url, value in seed:
        jar.store(url, [value])
    assert _sent(jar, "https://a.example/x") == {"sid=1"} and jar.header_for("https://b.example/") is None


def test_a_job_names_only_a_seed_its_pool_offers() -> None:
    pool = ScrapePoolSpec.model_validate(
        {
            "redis": {"url": "redis://r:6379/0"},
            "worker": {"secrets": ["logins"]},
            "sessionSeeds": [{"name": "shop", "secretRef": {"name": "logins", "key": "shop"}}],
        }
    )
    job = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://a.example/"], "session": {"seed": "shop"}})
    assert unknown_session_seed(job, pool) is None
    assert build_worker_spec(job, pool)["session_seed"] == {"name": "shop", "secret": {"name": "logins", "key": "shop"}}
    other = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://a.example/"], "session": {"seed": "bank"}})
    problem = unknown_session_seed(other, pool)
    assert problem is not None and "'bank'" in problem and "shop" in problem
    with pytest.raises(ValidationError, match=r"worker\.secrets"):
        ScrapePoolSpec.model_validate(
            {
                "redis": {"url": "redis://r:6379/0"},
                "sessionSeeds": [{"name": "x", "secretRef": {"name": "s", "key": "k"}}],
            }
        )
