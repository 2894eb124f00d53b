"""Which pages may share a browser context (trawl.worker.browser.contexts), and how a page tells its own
refusals from its siblings' on a shared policy proxy."""

from __future__ import annotations

from trawl.worker.browser.contexts import context_key
from trawl.worker.browser.page import authority_of
from trawl.worker.browser.proxy import ProxyStats
from trawl.worker.browser.settings import BrowserSettings
from trawl.worker.cookies import SessionJar
from trawl.worker.proxies import ProxyEndpoint
from trawl.worker.sessions import Session


def _jar(owner: str) -> SessionJar:
    jar = SessionJar()
    jar.owner = owner
    return jar


def test_only_one_job_as_one_identity_shares_a_context() -> None:
    assert context_key("", None, None, None) is None  # no job: a context of its own
    base = context_key("job-a", None, "UA", None)
    assert base == context_key("job-a", None, "UA", None)
    assert base != context_key("job-b", None, "UA", None)  # another job (another tenant's)
    assert base != context_key("job-a", None, "Other UA", None)
    assert context_key("job-a", _jar("s/1"), "UA", None) != context_key("job-a", _jar("s/2"), "UA", None)
    assert context_key("job-a", _jar("s/1"), "UA", None) != base  # a session's pages apart from sessionless ones
    one = ProxyEndpoint("http", "proxy.example", 3128, "alice", "pw1")
    two = ProxyEndpoint("http", "proxy.example", 3128, "bob", "pw2")
    assert context_key("job-a", None, "UA", one) != context_key("job-a", None, "UA", two)  # two accounts
    assert "pw1" not in repr(context_key("job-a", None, "UA", one))  # the credentials are never printed


def test_a_sessions_jar_is_owned_by_that_session() -> None:
    a = Session("id1", "J:ss", "J:sc", "example.com", "UA", "", 0.0, 1)
    b = Session("id1", "J:ss:other.example", "J:sc:other.example", "other.example", "UA", "", 0.0, 1)
    assert a.jar.owner == "J:ss/id1" and a.jar.owner != b.jar.owner


def test_authority_of_names_destinations_as_the_proxy_does() -> None:
    assert authority_of("https://Example.COM/x") == "example.com:443"
    assert authority_of("http://127.0.0.3:8080/secret") == "127.0.0.3:8080"
    assert authority_of("ws://h/s") == "h:80" and authority_of("wss://h/s") == "h:443"
    assert authority_of("http://[::1]:81/") == "[::1]:81"
    assert authority_of("data:text/html,x") is None and authority_of("http://h:99999/") is None


def test_a_page_counts_only_refusals_after_its_start_of_what_it_asked_for() -> None:
    stats = ProxyStats()
    for n, authority in enumerate(("127.0.0.3:80", "169.254.169.254:80", "127.0.0.3:80"), start=1):
        stats.refusals.append((n, authority, "blocked network"))
    assert stats.refused_since(1, {"127.0.0.3:80"}) == ["127.0.0.3:80: blocked network"]
    assert stats.refused_since(0, {"127.0.0.3:80", "169.254.169.254:80"}) == [
        "127.0.0.3:80: blocked network",
        "169.254.169.254:80: blocked network",
        "127.0.0.3:80: blocked network",
    ]
    assert stats.refused_since(0, {"example.com:443"}) == []


def test_pages_per_context_from_the_environment() -> None:
    assert BrowserSettings.from_env({}).pages_per_context == 50
    assert BrowserSettings.from_env({"TRAWL_BROWSER_PAGES_PER_CONTEXT": "5"}).pages_per_context == 5
    assert BrowserSettings.from_env({"TRAWL_BROWSER_PAGES_PER_CONTEXT": "0"}).pages_per_context == 1
