"""The web console's pure parts (trawl.resultsapi.console.session, .pages): where the token comes from, the
CSRF token, the cookie, the headers, and pages that escape whatever a job author wrote."""

from __future__ import annotations

from trawl.resultsapi.console import pages
from trawl.resultsapi.console.session import (
    COOKIE,
    PAGE_HEADERS,
    cookie_attributes,
    csrf_ok,
    csrf_token,
    is_secure,
    same_origin,
    viewer_token,
)

KEY = b"k"


def test_the_authorization_header_wins_over_the_cookie_and_a_malformed_cookie_is_none() -> None:
    assert viewer_token({"Authorization": "Bearer abc"}, {COOKIE: "cookie"}) == ("abc", False)
    assert viewer_token({}, {COOKIE: "cookie"}) == ("cookie", True)
    assert viewer_token({}, {COOKIE: "a b"}) == (None, False)
    assert viewer_token({}, {COOKIE: "x" * 20_000}) == (None, False)
    assert viewer_token({"Authorization": "Basic abc"}, {}) == (None, False)


def test_csrf_tokens_are_bound_to_the_viewer_token() -> None:
    mine = csrf_token(KEY, "token-a")
    assert csrf_ok(KEY, "token-a", mine)
    assert not csrf_ok(KEY, "token-b", mine)
    assert not csrf_ok(KEY, "token-a", "")
    assert not csrf_ok(KEY, "token-a", None)
    assert "token-a" not in mine


def test_cross_site_posts_are_refused() -> None:
    assert same_origin({"Sec-Fetch-Site": "same-origin"}, "console.example")
    assert not same_origin({"Sec-Fetch-Site": "cross-site", "Origin": "https://console.example"}, "console.example")
    assert same_origin({"Origin": "https://console.example"}, "console.example")
    assert not same_origin({"Origin": "https://evil.example"}, "console.example")
    assert not same_origin({"Origin": "null"}, "console.example")


def test_the_cookie_is_http_only_strict_and_secure_behind_tls() -> None:
    assert cookie_attributes(False) | {"secure": True} == cookie_attributes(True)
    attrs = cookie_attributes(True)
    assert attrs["httponly"] is True and attrs["samesite"] == "Strict" and attrs["path"] == "/console"
    assert is_secure("http", {"X-Forwarded-Proto": "https"}) and not is_secure("http", {})


def test_headers_forbid_inline_script_and_framing() -> None:
    csp = PAGE_HEADERS["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe" not in csp and "frame-ancestors 'none'" in csp
    assert PAGE_HEADERS["X-Frame-Options"] == "DENY" and PAGE_HEADERS["Referrer-Policy"] == "no-referrer"


HOSTILE = '<script>alert(1)</script>"'


def job() -> dict[str, object]:
    return {
        "metadata": {"namespace": "team", "name": "books"},
        "spec": {"pool": "shop"},
        "status": {
            "phase": "Running", "progress": 40, "message": HOSTILE,
            "counts": {"total": 10, "succeeded": 4, "deadLettered": 1},
            "conditions": [{"type": "Ready", "status": "False", "reason": "X", "message": HOSTILE}],
            "throttledDomains": [{"domain": "slow.example"}],
        },
    }  # fmt: skip


def test_pages_escape_what_job_authors_wrote_and_hide_the_retry_button_without_the_right() -> None:
    viewer = pages.Viewer("alice", "c5rf", via_cookie=True)
    extras = pages.JobExtras([{"url": HOSTILE, "lastError": HOSTILE}], [{"title": HOSTILE}], None, [], False)
    html = pages.job_page(viewer, job(), extras)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'id="retry"' not in html and '<script src="/console/static/console.js" defer>' in html
    allowed = pages.job_page(viewer, job(), pages.JobExtras([], None, None, None, True))
    assert 'id="retry"' in allowed and 'value="c5rf"' in allowed
    assert "You may not read this job's results" in allowed and "You may not list Events" in allowed


def test_live_values_of_jobs_and_pools() -> None:
    live = pages.job_live(job())
    assert live["job/team/books/progress"] == "40" and live["job/team/books/deadLettered"] == "1"
    queue = {"ready": 5, "delayed": 2, "throughputPerSecond": 1.25, "failureRate": 0.1}
    status = {"replicas": 2, "readyReplicas": 1, "desiredReplicas": 3, "queue": queue}
    pool = {"metadata": {"namespace": "team", "name": "shop"}, "status": status}
    values = pages.pool_live(pool, [job()])
    assert values["pool/team/shop/backlog"] == "7"
    assert values["pool/team/shop/replicas"] == "1/2 (wants 3)"
    assert values["pool/team/shop/failureRate"] == "10.0 %"
    assert values["pool/team/shop/throttled"] == "slow.example"
    assert pages.pool_live(pool, [])["pool/team/shop/throttled"] == "none"
