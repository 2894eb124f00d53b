"""Refresh jobs' pure parts (spec.refresh): the page state's encoding and its bound, fingerprints, the label a
page gets against the lineage's last run, the validators sent, the lineage a job compares with, the wire
settings and what the job's status shows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ScrapeJobSpec, ScrapeJobStatus
from trawl.jobspec.wire import build_worker_spec, refresh_lineage
from trawl.operator.job.status import JobFacts, derive_job_status
from trawl.queue.model import JobStats
from trawl.refresh import decide
from trawl.refresh import fingerprint as fp
from trawl.refresh.decide import RefreshSettings
from trawl.refresh.state import (
    MAX_ETAG,
    MAX_FIELDS_TEXT,
    MAX_URL,
    MAX_VALUE,
    Change,
    PageState,
    decode,
    encode,
    encoded_prefix,
    job_tag,
    url_field,
)
from trawl.worker.extract import ExtractOptions, Extractor
from trawl.worker.jobsettings import parse_worker_spec

SETTINGS = RefreshSettings(lineage="team-a/prices")
TAG, OTHER = job_tag("job-2"), job_tag("job-1")
NOW = 1_800_000_000
ETAG = {"etag": '"v2"', "last-modified": "Wed, 25 Nov 2026 10:00:00 GMT"}


def _old(change: Change = Change.NEW, fingerprint: str = "aaaa", **kw: Any) -> PageState:
    return PageState(
        tag=OTHER, change=change, fingerprint=fingerprint, fetched_at=NOW - 3600, changed_at=NOW - 7200, **kw
    )


def _job(**refresh: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://shop.test/a"], "refresh": refresh})


def test_state_round_trips_and_stays_bounded() -> None:
    state = PageState(TAG, Change.CHANGED, "0123456789abcdef", '"x"', "Wed, 25 Nov 2026 10:00:00 GMT", NOW, NOW)
    assert decode(encode(state)) == state
    assert decode(encode(state).encode()) == state
    huge = PageState(TAG, Change.NEW, "f" * 16, '"' + "e" * 5000 + '"', "x" * 500, NOW, NOW)
    raw = encode(huge)
    assert len(raw) < 80, "validators over their caps are not kept: the page is fetched in full next time"
    assert decode(raw) == PageState(TAG, Change.NEW, "f" * 16, "", "", NOW, NOW)
    digests = fp.field_digests({f"field{i}": i for i in range(200)})
    assert len(digests) == MAX_FIELDS_TEXT, "64 fields kept"
    worst = PageState(TAG, Change.UNCHANGED, "f" * 16, "e" * MAX_ETAG, "x" * 40, 2**40, 2**40, "u" * MAX_URL, digests)
    assert len(encode(worst)) <= MAX_VALUE
    with_url = PageState(TAG, Change.NEW, "f" * 16, url="https://shop.test/a")
    assert decode(encode(with_url)) == with_url
    assert decode(encode(with_url._replace(url="u" * (MAX_URL + 1)))) == with_url._replace(url=""), "too long: not kept"
    assert decode("1\nab\nnew\nf\n\n\n1\n1") == PageState("ab", Change.NEW, "f", "", "", 1, 1), "saved before URLs"
    # a newline in a header value would split the record: it is not kept
    assert decode(encode(PageState(TAG, Change.NEW, "f", 'a"\nb', "", 1, 1))) == PageState(
        TAG, Change.NEW, "f", "", "", 1, 1
    )


@pytest.mark.parametrize("raw", [None, "", "garbage", "2\nab\nnew\nf\n\n\n1\n1", "1\nab\nweird\nf\n\n\n1\n1", b"1\nab"])
def test_unreadable_state_is_no_state(raw: Any) -> None:
    assert decode(raw) is None


def test_keys_are_short_and_stable() -> None:
    assert url_field("https://shop.test/a") == url_field("https://shop.test/a") != url_field("https://shop.test/b")
    assert len(url_field("https://shop.test/" + "x" * 5000)) == 24
    assert len(job_tag("a" * 36)) == 8 and encoded_prefix(TAG).startswith("1\n" + TAG)


def test_fingerprints_ignore_what_does_not_matter() -> None:
    assert fp.of_record({"price": "9.99", "title": "A"}) == fp.of_record({"title": "A", "price": "9.99"})
    assert fp.of_record({"price": "9.99"}) != fp.of_record({"price": "10.99"})
    assert fp.of_text("Price  9.99\n\n in stock") == fp.of_text("Price 9.99 in stock")
    assert fp.of_bytes(b"a") != fp.of_bytes(b"b") and len(fp.of_bytes(b"a")) == 16


def test_a_timestamp_outside_the_fields_is_not_a_change() -> None:
    options = ExtractOptions.from_dict({"fields": [{"name": "price", "selector": ".price"}], "title": False})
    record = Extractor(replace(options, fingerprint="Record"))
    text = Extractor(replace(options, fingerprint="Text"))
    page = "<html><body><p class=price>9.99</p><footer>generated {}</footer></body></html>"
    a, b = (record.extract(page.format(t), "https://shop.test/a") for t in ("10:00", "10:05"))
    assert a.fingerprint and a.fingerprint == b.fingerprint, "the record's fields did not change"
    ta, tb = (text.extract(page.format(t), "https://shop.test/a") for t in ("10:00", "10:05"))
    assert ta.fingerprint != tb.fingerprint, "the text did"
    c = record.extract(page.format("10:00").replace("9.99", "8.99"), "https://shop.test/a")
    assert c.fingerprint != a.fingerprint


def test_labels_against_the_last_run() -> None:
    new = decide.fetched(None, TAG, "aaaa", ETAG, NOW, False)
    assert (new.change, new.write_record, new.state.etag, new.state.changed_at) == (Change.NEW, True, '"v2"', NOW)
    same = decide.fetched(_old(), TAG, "aaaa", {}, NOW, False)
    assert (same.change, same.write_record, same.state.changed_at) == (Change.UNCHANGED, False, NOW - 7200)
    assert decide.fetched(_old(), TAG, "aaaa", {}, NOW, True).write_record, "records: All writes it"
    changed = decide.fetched(_old(), TAG, "bbbb", {}, NOW, False)
    assert (changed.change, changed.write_record, changed.state.changed_at) == (Change.CHANGED, True, NOW)
    back = decide.fetched(_old(Change.GONE, ""), TAG, "aaaa", {}, NOW, False)
    assert back.change == Change.NEW, "a page that was gone and is back is new again"


def test_a_304_is_unchanged_and_keeps_what_was_known() -> None:
    old = _old(etag='"v1"', last_modified="Tue, 24 Nov 2026 10:00:00 GMT")
    out = decide.not_modified(old, TAG, {"etag": '"v1b"'}, NOW, False)
    assert (out.change, out.write_record) == (Change.UNCHANGED, False)
    assert (out.state.fingerprint, out.state.etag, out.state.last_modified) == ("aaaa", '"v1b"', old.last_modified)
    assert (out.state.tag, out.state.fetched_at, out.state.changed_at) == (TAG, NOW, old.changed_at)


def test_gone_only_for_pages_seen_before() -> None:
    assert decide.gone(None, TAG, 404, NOW) is None, "a page never seen fails as in any job"
    assert decide.gone(_old(), TAG, 500, NOW) is None
    assert decide.gone(_old(), TAG, None, NOW) is None
    out = decide.gone(_old(), TAG, 410, NOW)
    assert out is not None and (out.change, out.write_record, out.state.fingerprint) == (Change.GONE, True, "")


def test_a_redelivered_task_keeps_the_label_its_job_decided() -> None:
    """Its state was saved before the ack was lost: the label stands, and the page is fetched in full."""
    saved = decide.fetched(_old(), TAG, "bbbb", {}, NOW, False).state
    assert decide.conditional_headers(saved, TAG, SETTINGS) == {}
    again = decide.fetched(saved, TAG, "bbbb", {}, NOW + 5, False)
    assert (again.change, again.write_record, again.state.fetched_at) == (Change.CHANGED, True, NOW + 5)


def test_validators_sent() -> None:
    old = _old(etag='"v1"', last_modified="Tue, 24 Nov 2026 10:00:00 GMT")
    assert decide.conditional_headers(old, TAG, SETTINGS) == {
        "If-None-Match": '"v1"',
        "If-Modified-Since": "Tue, 24 Nov 2026 10:00:00 GMT",
    }
    assert decide.conditional_headers(_old(), TAG, SETTINGS) == {}, "no validators known"
    assert decide.conditional_headers(None, TAG, SETTINGS) == {}
    off = RefreshSettings(lineage="team-a/prices", conditional=False)
    assert decide.conditional_headers(old, TAG, off) == {}
    assert decide.conditional_headers(_old(Change.GONE, etag='"v1"'), TAG, SETTINGS) == {}


def test_the_lineage_is_always_in_the_jobs_namespace() -> None:
    assert refresh_lineage("team-a", "prices-1", _job()) == "team-a/prices-1"
    assert refresh_lineage("team-a", "prices-29", _job(), cron="prices") == "team-a/prices"
    assert refresh_lineage("team-a", "j", _job(lineage="shop")) == "team-a/shop"
    assert (
        refresh_lineage("team-a", "j", ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://a.test/"]})) is None
    )
    for hostile in ("team-b/shop", "../x", "a:b", "{tag}", "x" * 64):
        with pytest.raises(ValidationError):
            _job(lineage=hostile)


def test_wire_settings_round_trip() -> None:
    spec = build_worker_spec(_job(fingerprint="Text", records="All", forceRefresh=True, retainDays=7), None, "ns/l")
    assert spec["refresh"] == {
        "lineage": "ns/l",
        "fingerprint": "Text",
        "conditional": False,
        "records_all": True,
        "retain_seconds": 7 * 86400,
        "changed_fields": False,
        "revisit_min_seconds": 0,
        "revisit_max_seconds": 0,
    }
    worker = parse_worker_spec(spec)
    assert worker.refresh == RefreshSettings("ns/l", "Text", False, True, 7 * 86400)
    assert worker.extract.fingerprint == "Text"
    assert parse_worker_spec(build_worker_spec(_job(), None, None)).refresh is None, "no lineage: no refresh"
    body = parse_worker_spec(build_worker_spec(_job(fingerprint="Body"), None, "ns/l"))
    assert body.extract.fingerprint == "", "Body is taken of the bytes, not where the page is parsed"


def test_status_shows_the_changes() -> None:
    now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    stats = JobStats(
        10, 0, 0, 0, 10, 0, True, False, now.timestamp() - 9, finished_at=now.timestamp() - 1, changes=(2, 3, 4, 1)
    )
    status, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats), {}, now)
    assert status["changes"] == {"new": 2, "changed": 3, "unchanged": 4, "gone": 1}
    skipped = stats._replace(changes=(0, 0, 1, 0), not_revisited=9)
    status, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=skipped), {}, now)
    assert status["changes"] == {"new": 0, "changed": 0, "unchanged": 1, "gone": 0, "notRevisited": 9}
    ScrapeJobStatus.model_validate(status)
    plain = JobStats(10, 0, 0, 0, 10, 0, True, False, now.timestamp() - 9, finished_at=now.timestamp() - 1)
    assert "changes" not in derive_job_status(JobFacts(generation=1, suspend=False, stats=plain), {}, now)[0]


def test_a_page_the_run_never_reached_is_gone_once_then_forgotten() -> None:
    known = _old(Change.CHANGED, url="https://shop.test/a")
    outcome = decide.unlinked(known, TAG, NOW)
    assert outcome is not None and outcome.write_record
    assert (outcome.change, outcome.state.tag, outcome.state.url, outcome.state.changed_at) == (
        Change.GONE,
        TAG,
        known.url,
        NOW,
    )
    assert decide.unlinked(known._replace(tag=TAG), TAG, NOW) is None, "this run handled it"
    assert decide.unlinked(known._replace(url=""), TAG, NOW) is None, "no URL to name"
    gone_before = outcome.state
    assert decide.unlinked(gone_before, "other-run", NOW) is None, "reported once"
    assert decide.forgotten(gone_before, "other-run") and not decide.forgotten(gone_before, TAG)
    assert not decide.forgotten(known, TAG)


def test_adaptive_revisits_leave_a_stable_page_alone_for_half_its_stable_time_within_the_bounds() -> None:
    hour = 3600
    settings = RefreshSettings("ns/l", revisit_min_seconds=2 * hour, revisit_max_seconds=24 * hour)
    # unchanged for 10 hours at its last visit, an hour ago: fresh for 5 hours
    stable = PageState(OTHER, Change.UNCHANGED, "aaaa", fetched_at=NOW - hour, changed_at=NOW - 11 * hour)
    assert decide.revisit_interval(stable, settings) == 5 * hour
    skipped = decide.not_due(stable, TAG, settings, NOW)
    assert skipped is not None and skipped.change == Change.UNCHANGED and not skipped.write_record
    assert skipped.state == stable._replace(tag=TAG), "state kept, tagged with this run (the sweep skips it)"
    assert decide.not_due(stable, TAG, settings, NOW + 4 * hour) is None, "due once 5 hours have passed"
    # bounds: a page unchanged for months is revisited at least daily; a page stable for minutes every 2 hours
    ancient = stable._replace(changed_at=NOW - 90 * 24 * hour)
    assert decide.revisit_interval(ancient, settings) == 24 * hour
    assert decide.revisit_interval(stable._replace(changed_at=NOW - hour - 60), settings) == 2 * hour
    # always due: changed or new at the last visit, gone, handled by this run, or revisits off
    for change in (Change.CHANGED, Change.NEW, Change.GONE):
        assert decide.not_due(stable._replace(change=change), TAG, settings, NOW) is None
    assert decide.not_due(stable, OTHER, settings, NOW) is None
    assert decide.not_due(stable, TAG, RefreshSettings("ns/l"), NOW) is None
    ahead = stable._replace(fetched_at=NOW + 60)  # saved by a worker whose clock runs a minute ahead
    assert decide.not_due(ahead, TAG, RefreshSettings("ns/l"), NOW) is None, "revisits off: always due"
    assert decide.not_due(None, TAG, settings, NOW) is None


def test_revisit_bounds_reach_the_worker_unless_every_page_is_forced() -> None:
    revisit = {"maxHours": 24, "minHours": 1.5}
    worker = parse_worker_spec(build_worker_spec(_job(revisit=revisit), None, "ns/l"))
    assert worker.refresh is not None
    assert (worker.refresh.revisit_min_seconds, worker.refresh.revisit_max_seconds) == (5400, 86400)
    forced = parse_worker_spec(build_worker_spec(_job(revisit=revisit, forceRefresh=True), None, "ns/l"))
    assert forced.refresh is not None and forced.refresh.revisit_max_seconds == 0
    with pytest.raises(ValidationError, match="minHours 3 is above maxHours 2"):
        _job(revisit={"maxHours": 2, "minHours": 3})


def test_changed_fields_are_named_from_per_field_digests() -> None:
    before = fp.field_digests({"price": "9.99", "title": "Lamp", "stock": 3})
    assert fp.changed_names({"price": "8.99", "title": "Lamp", "stock": 3}, before) == ["price"]
    assert fp.changed_names({"price": "9.99", "title": "Lamp", "stock": 3, "new": 1}, before) == ["new"]
    assert fp.changed_names({"price": "9.99", "title": "Lamp"}, before) == [], "a field that went is not named"
    assert fp.field_digests({"b": 1, "a": [1, 2]}) == fp.field_digests({"a": [1, 2], "b": 1}), "order-free"
