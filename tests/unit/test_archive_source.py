"""Which archive a re-extraction job may name: its own namespace's part of the pool's archive, plain names only."""

from __future__ import annotations

import pytest

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
