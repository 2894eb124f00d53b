"""The operator's autoscaler glue: which hosts a job's work goes to, and the rate-limit ceiling input."""

from __future__ import annotations

from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator.autoscaling import Autoscalers, domain_backlog, job_hosts
from trawl.operator.handlers import POOL_SYNC_SECONDS, POOL_TICK_SECONDS, pool_poll_seconds

POOL = ScrapePoolSpec.model_validate(
    {"redis": {"url": "redis://r:6379"}, "defaults": {"politeness": {"requestsPerSecond": 3}}}
)


def test_job_hosts_from_urls_and_ranges() -> None:
    spec = {"urls": ["http://A.example/x", "https://b.example/"], "urlRanges": [{"template": "http://c.example/{n}"}]}
    assert job_hosts(spec) == ["a.example", "b.example", "c.example"]


def test_too_many_hosts_is_unbounded() -> None:
    assert job_hosts({"urls": [f"http://h{i}.example/" for i in range(40)]}) is None


def test_backlog_uses_pool_defaults_and_job_overrides() -> None:
    jobs = [
        {"waiting": 100, "hosts": ["a.example"], "politeness": {}},
        {"waiting": 50, "hosts": ["a.example"], "politeness": {"requestsPerSecond": 1}},
        {"waiting": 0, "hosts": ["idle.example"], "politeness": {}},
    ]
    backlog = domain_backlog(jobs, POOL)
    assert backlog is not None
    assert set(backlog) == {"a.example"}
    assert backlog["a.example"].tasks == 150
    assert backlog["a.example"].requests_per_second == 1  # the strictest limit on a shared domain wins


def test_unknown_hosts_make_the_ceiling_unbounded() -> None:
    assert domain_backlog([{"waiting": 5, "hosts": None, "politeness": {}}], POOL) is None


def test_pool_timer_interval_is_poll_seconds_when_autoscaling() -> None:
    assert pool_poll_seconds({"autoscaling": {"pollSeconds": 7}}) == 7
    assert pool_poll_seconds({"autoscaling": {}}) == max(POOL_TICK_SECONDS, 5)  # the API default
    assert pool_poll_seconds({"autoscaling": {"enabled": False, "pollSeconds": 7}}) == POOL_SYNC_SECONDS
    assert pool_poll_seconds({"autoscaling": {"pollSeconds": "x"}}) == POOL_SYNC_SECONDS  # reported by reconcile


def test_pods_are_listed_for_startup_only_when_the_ready_count_changes() -> None:
    a, key = Autoscalers(), ("ns", "p")
    assert not a.wants_startups(key, 0)  # nothing ready: nothing to measure
    assert a.wants_startups(key, 2)  # pods became ready
    assert not a.wants_startups(key, 2)  # same count: no list on this poll
    assert a.wants_startups(key, 3)
    a.forget(key)
    assert a.wants_startups(key, 3)  # after a restart (or a re-created pool): measure again
