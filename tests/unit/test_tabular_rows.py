"""The pure parts of the tabular sinks: the schema a job's spec gives, records as rows (types, bounds,
what does not fit going to extra), the split of a batch into files, the names that carry rows and
checksums, the spec's shape (formats, a Files directory that cannot climb out), the screenshot bound."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ExtractSpec, OutputSpec, ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.api.tabular import MAX_CELL_BYTES, MAX_EXTRA_BYTES, MAX_FILE_ROWS, FileFormat
from trawl.jobspec.admission import screenshot_without_browser, unmounted_directory
from trawl.sinks.base import Record, record_key
from trawl.sinks.tabular import (
    Column,
    Kind,
    chunks,
    cut,
    describe,
    encode_csv,
    parse_name,
    part_name,
    parts,
    schema_for,
    schema_of_spec,
    to_row,
)
from trawl.worker.formats import FormatOptions, bound_screenshot, run_formats
from trawl.worker.jobsettings import parse_worker_spec
from trawl.worker.jobsinks import job_schema


def rec(url: str, **data: Any) -> Record:
    return Record("j", url, {"key": record_key("j", url), "job": "j", "url": url, "status": 200, **data})


def names(schema: tuple[Column, ...]) -> list[str]:
    return [c.name for c in schema]


def test_schema_is_fixed_fields_then_requested_formats_then_the_jobs_fields() -> None:
    extract = ExtractSpec.model_validate(
        {
            "formats": ["links", "markdown"],
            "images": True,
            "fields": [{"name": "price", "selector": ".p"}, {"name": "tags", "selector": ".t", "multiple": True}],
        }
    )
    schema = schema_of_spec(extract)
    fixed = ["key", "job", "url", "finalUrl", "status", "depth", "attempt", "fetchedAt", "title", "change"]
    assert names(schema)[:10] == fixed
    assert names(schema)[10:] == ["markdown", "links", "images", "price", "tags", "truncated", "extra"]
    kinds = {c.name: c.kind for c in schema}
    assert (kinds["status"], kinds["fetchedAt"], kinds["links"], kinds["tags"]) == (
        Kind.INT,
        Kind.FLOAT,
        Kind.LIST,
        Kind.LIST,
    )
    # The worker builds the same schema from its own copy of the spec (the operator's manifest states it).
    worker = parse_worker_spec({"extract": extract.model_dump(mode="json")})
    assert job_schema(worker) == schema
    assert describe(schema)[4] == {"name": "status", "type": "int64"}


def test_a_field_named_like_a_fixed_column_keeps_the_column_and_its_type() -> None:
    schema = schema_for([("status", False), ("extra", False), ("truncated", True), ("x", False)], [])
    assert names(schema).count("status") == 1 and names(schema)[-3:] == ["x", "truncated", "extra"]
    row = to_row({"url": "u", "status": "not a number", "x": 5}, schema)
    assert row["status"] is None and json.loads(row["extra"]) == {"status": "not a number"}
    assert row["x"] == "5"


def test_undeclared_fields_and_render_info_go_to_extra() -> None:
    schema = schema_for([("price", False)], [])
    row = to_row({"url": "u", "price": "£3", "rendered": True, "requests": 7, "changedFields": ["a"]}, schema)
    assert json.loads(row["extra"]) == {"rendered": True, "requests": 7, "changedFields": ["a"]}
    assert to_row({"url": "u"}, schema)["extra"] is None


def test_cells_lists_and_extra_are_bounded_and_named_in_truncated() -> None:
    schema = schema_for([("big", False), ("many", True)], ["links"])
    huge = "é" * MAX_CELL_BYTES  # two bytes each
    row = to_row(
        {
            "url": "u",
            "big": huge,
            "many": ["x" * 1000] * 5000,
            "links": ["http://a/"],
            "other": "y" * (MAX_EXTRA_BYTES + 1),
            "truncated": ["markdown"],
        },
        schema,
    )
    assert len(row["big"].encode()) <= MAX_CELL_BYTES and row["big"].startswith("éé")
    assert sum(len(x) + 1 for x in row["many"]) <= MAX_CELL_BYTES + 1 and len(row["many"]) < 5000
    assert row["links"] == ["http://a/"] and row["extra"] is None
    assert row["truncated"] == ["markdown", "big", "many", "extra"]


def test_cut_never_splits_a_character() -> None:
    assert cut("aé", 2) == ("a", True)
    assert cut("abc", 3) == ("abc", False)


def test_values_of_the_wrong_type_never_reach_a_typed_column() -> None:
    schema = schema_for([], ["links"])
    row = to_row({"url": "u", "status": True, "depth": 2**70, "fetchedAt": "soon", "links": "not-a-list"}, schema)
    assert (row["status"], row["depth"], row["fetchedAt"], row["links"]) == (None, None, None, None)
    assert json.loads(row["extra"]) == {"status": True, "depth": 2**70, "fetchedAt": "soon", "links": "not-a-list"}


def test_a_batch_is_split_into_files_by_rows_and_bytes() -> None:
    records = [rec(f"http://s/{i}") for i in range(MAX_FILE_ROWS + 3)]
    rows = [to_row(r.data, schema_for([], [])) for r in records]
    sizes = [len(recs) for recs, _ in chunks(records, rows)]
    assert sizes == [MAX_FILE_ROWS, 3]
    heavy = [{"a": "x" * (40 << 20)} for _ in range(3)]  # 40 MB each: one per file
    assert [len(c) for _, c in chunks(records[:3], heavy)] == [1, 1, 1]


def test_csv_quotes_what_would_break_a_row_and_reads_back() -> None:
    schema = schema_for([("note", False)], ["links"])
    nasty = 'a,"b"\r\nc'
    body = encode_csv(schema, [to_row({"url": "u", "note": nasty, "links": ["x", "y"]}, schema)])
    rows = list(csv.DictReader(io.StringIO(body.decode(), newline="")))
    assert len(rows) == 1 and rows[0]["note"] == nasty and json.loads(rows[0]["links"]) == ["x", "y"]
    assert rows[0]["status"] == "" and list(rows[0]) == names(schema)


def test_parts_names_carry_rows_and_checksum() -> None:
    batch = [rec("http://s/1"), rec("http://s/2")]
    (part,) = parts(FileFormat.PARQUET, schema_for([], []), batch)
    name = part_name(123, part, FileFormat.PARQUET)
    assert name.endswith("-2.parquet") and parse_name("p/records/" + name) == (part.sha256, 2)
    assert parse_name("00000000000000000001-deadbeef-7.jsonl.gz") == ("", 7)  # before checksums
    assert parse_name("manifest.json") is None and parse_name("a-b-c.csv") is None


def test_sink_spec_shape() -> None:
    refs = {"accessKeyIdSecretRef": {"name": "s", "key": "a"}, "secretAccessKeySecretRef": {"name": "s", "key": "b"}}
    s3 = OutputSpec.model_validate({"sink": "S3", "s3": {"bucket": "bkt", "format": "Parquet", **refs}})
    assert s3.s3 is not None and s3.s3.format == FileFormat.PARQUET
    files = OutputSpec.model_validate({"sink": "Files", "files": {"directory": "/data/out"}})
    assert files.files is not None and files.files.format == FileFormat.PARQUET
    with pytest.raises(ValidationError, match=r"output\.files is required"):
        OutputSpec.model_validate({"sink": "Files"})
    for bad in ("/data/../etc", "/data/./x", "relative", "/data//x", "/data/.hidden"):
        with pytest.raises(ValidationError):
            OutputSpec.model_validate({"sink": "Files", "files": {"directory": bad}})
    with pytest.raises(ValidationError):
        OutputSpec.model_validate({"sink": "Files", "files": {"directory": "/d", "format": "Excel"}})


def test_screenshot_format_turns_the_browser_shot_on_and_is_bounded() -> None:
    job = {"extract": {"formats": ["screenshot"]}, "render": {"mode": "Browser"}}
    spec = parse_worker_spec(job)
    assert spec.render is not None and spec.render.screenshot
    assert parse_worker_spec({"extract": {"formats": ["screenshot"]}}).render is None
    options = FormatOptions(formats=("screenshot",), max_bytes=100)
    small, data = {"screenshot": "x" * 100}, {}
    assert not bound_screenshot(options, small, data) and small["screenshot"]
    big, data = {"screenshot": "x" * 101}, {"truncated": ["markdown"]}
    assert bound_screenshot(options, big, data) and "screenshot" not in big
    assert data["truncated"] == ["markdown", "screenshot"]
    assert not bound_screenshot(FormatOptions(max_bytes=1), {"screenshot": "xx"}, {})  # render.screenshot alone
    assert "screenshot" not in run_formats(options, None, "", "http://s/", [], timed=False).data  # type: ignore[arg-type]
    assert ScrapeJobSpec.model_validate({"pool": "p", "urls": ["http://s/"], "extract": job["extract"]})


def test_admission_screenshot_needs_a_browser_and_files_a_writable_mount() -> None:
    plain_pool = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379"}})
    browser_pool = ScrapePoolSpec.model_validate(
        {"redis": {"url": "redis://r:6379"}, "worker": {"browser": {}}, "jobLimits": {}}
    )
    shot = {"pool": "p", "urls": ["http://s/"], "extract": {"formats": ["screenshot"]}}
    problem = screenshot_without_browser(ScrapeJobSpec.model_validate(shot), plain_pool)
    assert problem is not None and "render.mode Browser" in problem
    rendered = ScrapeJobSpec.model_validate(shot | {"render": {"mode": "Browser"}})
    assert screenshot_without_browser(rendered, browser_pool) is None
    files = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": ["http://s/"], "output": {"sink": "Files", "files": {"directory": "/out/x"}}}
    )
    problem = unmounted_directory(files, plain_pool)
    assert problem is not None and problem.startswith("output.files.directory /out/x is not on a writable volume")
