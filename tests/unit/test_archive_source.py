"""Which archive a re-extraction job may name: its own namespace's part of the pool's archive, plain names only."""

from __future__ import annotations

import pytest

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.archive.admission import archive_problem, location_wire, source_directory
from trawl.archive.cdx import surt
from trawl.archive.source import ArchiveRefused, ArchiveSource, archive_prefix, job_archive_prefix
from trawl.archive.writer import split_ready

pytestmark = pytest.mark.unit
ROOT = "archive/"


def test_own_job_and_path() -> None:
    assert archive_prefix(ArchiveSource(job="crawl-1"), namespace="team-a", location=ROOT) == "archive/team-a/crawl-1/"
    assert (
        archive_prefix(ArchiveSource(path="2026/nov"), namespace="team-a", location=ROOT) == "archive/team-a/2026/nov/"
    )
    same = job_archive_prefix(location=ROOT, namespace="team-a", job="crawl-1")
    assert archive_prefix(ArchiveSource(job="crawl-1", namespace="team-a"), namespace="team-a", location=ROOT) == same


@pytest.mark.parametrize(
    "source",
    [
        ArchiveSource(job="crawl-1", namespace="team-b"),  # another namespace's archive
        ArchiveSource(path="../team-b/crawl-1"),
        ArchiveSource(path="x/../../team-b"),
        ArchiveSource(path="/etc/passwd"),
        ArchiveSource(path="a\\..\\b"),
        ArchiveSource(path="a//b"),
        ArchiveSource(path="./a"),
        ArchiveSource(path="a/\x00"),
        ArchiveSource(path="a/" + "b" * 600),
        ArchiveSource(job="../x"),
        ArchiveSource(job="Crawl_1"),
        ArchiveSource(),
        ArchiveSource(job="a", path="b"),
    ],
)
def test_hostile_sources_refused(source: ArchiveSource) -> None:
    with pytest.raises(ArchiveRefused) as err:
        archive_prefix(source, namespace="team-a", location=ROOT)
    assert len(str(err.value)) < 200


def test_surt_keys() -> None:
    assert surt("http://www.Example.com/a?b=1") == "com,example)/a?b=1"
    assert surt("http://127.0.0.1:8080/x") == "1,0,0,127:8080)/x"
    assert surt("https://example.com:443") == "com,example)/"


def test_ready_names() -> None:
    assert split_ready("TRAWL-1-w-ab.warc.gz.12.3.ready") == ("TRAWL-1-w-ab.warc.gz", 12, 3)


def _pool(archive: dict[str, object], secrets: list[str]) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate(
        {"redis": {"url": "redis://r:6379/0"}, "archive": archive, "worker": {"secrets": secrets}}
    )


S3_LOCATION = {
    "s3": {
        "bucket": "warc",
        "prefix": "archive/",
        "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
        "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
    }
}


def test_s3_location_needs_its_secrets_mounted_and_prefixes_by_namespace() -> None:
    job = ScrapeJobSpec.model_validate({"pool": "p", "archiveSource": {"job": "crawl-1"}})
    problem = archive_problem("team-a", "again", job, _pool(S3_LOCATION, []))
    assert problem is not None and problem[0] == "SecretNotMounted"
    pool = _pool(S3_LOCATION, ["s3"])
    assert archive_problem("team-a", "again", job, pool) is None
    assert location_wire(source_directory("team-a", job, pool), pool)["prefix"] == "archive/team-a/crawl-1/"
    hostile = ScrapeJobSpec.model_validate({"pool": "p", "archiveSource": {"path": "../team-b/crawl-1"}})
    assert archive_problem("team-a", "again", hostile, pool) == (
        "ArchiveSourceRefused",
        "spec.archiveSource: archive path segment '..' is not a plain name (no '.', '..', '' or symbols)",
    )


def test_a_pool_archive_is_one_location() -> None:
    with pytest.raises(ValueError, match="exactly one of directory and s3"):
        _pool({**S3_LOCATION, "directory": "/archive"}, ["s3"])
