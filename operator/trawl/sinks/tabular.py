"""Records as table rows: the schema a job's spec gives, each record as a row of it, and a batch of rows
as one CSV or Parquet file (or gzip JSON Lines), bounded. Pure but for pyarrow's encoding.

The schema is the record's fixed fields, the format fields the job asked for, then the job's own
fields in its order (a list of strings for ``multiple``), then ``truncated`` (what was cut) and
``extra``: the JSON of everything else a record carries (what a render adds, a field a job did not
declare, a value that does not fit its column's type), so no record can break the schema.

The author is hostile: a cell is cut to :data:`MAX_CELL_BYTES` (named in ``truncated``), ``extra`` over
:data:`MAX_EXTRA_BYTES` is left null (named too), and a batch is split into files of at most
:data:`MAX_FILE_ROWS` rows and about :data:`MAX_FILE_BYTES`. Column names are the API's field names
(``[A-Za-z_][A-Za-z0-9_]*``), so none can break a CSV header or a Parquet schema; the csv module quotes
every cell that needs it.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

from trawl.api.plain import MAX_CELL_BYTES, MAX_EXTRA_BYTES, MAX_FILE_BYTES, MAX_FILE_ROWS, FileFormat

from .base import Record, dumps

if TYPE_CHECKING:  # pydantic: the operator's side (schema_of_spec); a worker reads plain data
    from trawl.api.scrapejob import ExtractSpec


class Kind(StrEnum):
    STRING = "string"
    INT = "int64"
    FLOAT = "float64"
    BOOL = "bool"
    LIST = "list<string>"


class Column(NamedTuple):
    name: str
    kind: Kind


FIXED = (
    Column("key", Kind.STRING),
    Column("job", Kind.STRING),
    Column("url", Kind.STRING),
    Column("finalUrl", Kind.STRING),
    Column("status", Kind.INT),
    Column("depth", Kind.INT),
    Column("attempt", Kind.INT),
    Column("fetchedAt", Kind.FLOAT),
    Column("title", Kind.STRING),
    Column("change", Kind.STRING),
)
# Written only when the job asks for them (extract options and formats, render.screenshot), in this order.
OPTIONAL = (
    Column("text", Kind.STRING),
    Column("markdown", Kind.STRING),
    Column("structured", Kind.STRING),  # JSON
    Column("links", Kind.LIST),
    Column("images", Kind.LIST),
    Column("screenshot", Kind.STRING),  # base64 PNG
)
TRUNCATED = Column("truncated", Kind.LIST)
EXTRA = Column("extra", Kind.STRING)

SUFFIX = {FileFormat.JSON_LINES: ".jsonl.gz", FileFormat.CSV: ".csv", FileFormat.PARQUET: ".parquet"}
CONTENT_TYPE = {
    FileFormat.JSON_LINES: "application/x-ndjson",
    FileFormat.CSV: "text/csv; charset=utf-8",
    FileFormat.PARQUET: "application/vnd.apache.parquet",
}


def schema_for(fields: Iterable[tuple[str, bool]], optional: Iterable[str]) -> tuple[Column, ...]:
    """The columns of a job's files: ``fields`` are its (name, multiple) rules, ``optional`` the names of
    :data:`OPTIONAL` it writes. A field named like a fixed column keeps that column (and its type)."""
    wanted = set(optional)
    columns = [*FIXED, *(c for c in OPTIONAL if c.name in wanted)]
    taken = {c.name for c in columns} | {TRUNCATED.name, EXTRA.name}
    for name, multiple in fields:
        if name not in taken:
            columns.append(Column(name, Kind.LIST if multiple else Kind.STRING))
            taken.add(name)
    return (*columns, TRUNCATED, EXTRA)


def schema_of_spec(extract: ExtractSpec | None, *, screenshot: bool = False) -> tuple[Column, ...]:
    """:func:`schema_for` of a ScrapeJob's ``extract`` (and ``render.screenshot``)."""
    if extract is None:
        from trawl.api.scrapejob import ExtractSpec  # the operator's side: a worker never imports pydantic for it

        extract = ExtractSpec()
    formats = {f.value for f in extract.formats or ()}
    optional = formats | {n for n, on in (("text", extract.text), ("links", extract.links)) if on}
    optional |= {"images"} if extract.images else set()
    optional |= {"screenshot"} if screenshot else set()
    return schema_for(((r.name, r.multiple) for r in extract.fields or ()), optional)


def describe(schema: Sequence[Column]) -> list[dict[str, str]]:
    """The schema as the manifest states it."""
    return [{"name": c.name, "type": c.kind.value} for c in schema]


def cut(text: str, limit: int = MAX_CELL_BYTES) -> tuple[str, bool]:
    """``text`` in at most ``limit`` UTF-8 bytes (never half a character), and whether it was cut."""
    if len(text) * 4 <= limit:
        return text, False
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode("utf-8", "ignore"), True


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)


def _cell(value: Any, kind: Kind) -> tuple[Any, bool, bool]:
    """(the value as the column holds it, whether it was cut, whether it fits the type at all)."""
    if value is None:
        return None, False, True
    if kind == Kind.INT:
        ok = isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
        return (value, False, True) if ok else (None, False, False)
    if kind == Kind.FLOAT:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return (float(value), False, True) if ok else (None, False, False)
    if kind == Kind.BOOL:
        return (value, False, True) if isinstance(value, bool) else (None, False, False)
    if kind == Kind.LIST:
        if not isinstance(value, list):
            return None, False, False
        items, budget, was_cut = [], MAX_CELL_BYTES, False
        for item in value:
            if budget <= 0:
                was_cut = True
                break
            text, item_cut = cut(_as_text(item), budget)
            items.append(text)
            budget -= len(text.encode("utf-8", "surrogatepass")) + 1
            was_cut |= item_cut
        return items, was_cut, True
    text, was_cut = cut(_as_text(value))
    return text, was_cut, True


def to_row(data: dict[str, Any], schema: Sequence[Column]) -> dict[str, Any]:
    """One record as a row of ``schema``: every column present (None when the record has no value)."""
    row: dict[str, Any] = {}
    names = {c.name for c in schema}
    extra = {k: v for k, v in data.items() if k not in names}
    truncated = [str(t) for t in data.get(TRUNCATED.name) or () if isinstance(t, str)]
    for col in schema:
        if col in (TRUNCATED, EXTRA):
            continue
        value, was_cut, fits = _cell(data.get(col.name), col.kind)
        if not fits:
            extra[col.name] = data[col.name]  # kept, but where its type cannot break the column's
        if was_cut:
            truncated.append(col.name)
        row[col.name] = value
    encoded = dumps(extra) if extra else None
    if encoded is not None and len(encoded.encode("utf-8", "surrogatepass")) > MAX_EXTRA_BYTES:
        encoded = None
        truncated.append(EXTRA.name)
    row[TRUNCATED.name] = list(dict.fromkeys(truncated)) or None
    row[EXTRA.name] = encoded
    return row


def row_bytes(row: dict[str, Any]) -> int:
    """About what a row weighs in a file (the sum of its cells' lengths)."""
    total = 0
    for value in row.values():
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, list):
            total += sum(len(v) for v in value)
        else:
            total += 8
    return total


def chunks(records: Sequence[Record], rows: Sequence[dict[str, Any]]) -> Iterator[tuple[list[Record], list[Any]]]:
    """The batch split into files: at most :data:`MAX_FILE_ROWS` rows and about :data:`MAX_FILE_BYTES`."""
    start, size = 0, 0
    for i, row in enumerate(rows):
        weight = row_bytes(row)
        if i > start and (i - start >= MAX_FILE_ROWS or size + weight > MAX_FILE_BYTES):
            yield list(records[start:i]), list(rows[start:i])
            start, size = i, 0
        size += weight
    if start < len(rows):
        yield list(records[start:]), list(rows[start:])


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def encode_csv(schema: Sequence[Column], rows: Iterable[dict[str, Any]]) -> bytes:
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\r\n")  # RFC 4180
    writer.writerow([c.name for c in schema])
    for row in rows:
        writer.writerow([csv_cell(row.get(c.name)) for c in schema])
    return buf.getvalue().encode("utf-8", "surrogatepass")


def arrow_schema(schema: Sequence[Column]) -> Any:
    import pyarrow as pa  # only for workers that write Parquet

    types = {
        Kind.STRING: pa.string(),
        Kind.INT: pa.int64(),
        Kind.FLOAT: pa.float64(),
        Kind.BOOL: pa.bool_(),
        Kind.LIST: pa.list_(pa.string()),
    }
    return pa.schema([pa.field(c.name, types[c.kind], nullable=True) for c in schema])


def encode_parquet(schema: Sequence[Column], rows: Sequence[dict[str, Any]]) -> bytes:
    """One file, one row group (the batch)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows), schema=arrow_schema(schema))
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=max(1, len(rows)), compression="zstd")
    return sink.getvalue()


def encode(fmt: FileFormat, schema: Sequence[Column], records: Sequence[Record], rows: Sequence[Any]) -> bytes:
    if fmt == FileFormat.CSV:
        return encode_csv(schema, rows)
    if fmt == FileFormat.PARQUET:
        return encode_parquet(schema, rows)
    return gzip.compress("".join(dumps(r.data) + "\n" for r in records).encode(), compresslevel=6, mtime=0)


class Part(NamedTuple):
    """One file of a batch: its records, its bytes, and what its name says (rows, checksum)."""

    records: list[Record]
    body: bytes

    @property
    def rows(self) -> int:
        return len(self.records)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


def parts(fmt: FileFormat, schema: Sequence[Column], records: Sequence[Record]) -> list[Part]:
    """A batch as its files (CPU: run off the event loop)."""
    if fmt == FileFormat.JSON_LINES:
        return [Part(list(records), encode(fmt, schema, records, ()))] if records else []
    rows = [to_row(r.data, schema) for r in records]
    return [Part(recs, encode(fmt, schema, recs, chunk)) for recs, chunk in chunks(records, rows)]


def part_name(time_ns: int, part: Part, fmt: FileFormat) -> str:
    """``<ns timestamp>-<sha256>-<rows><suffix>``: the name carries what a manifest lists, so a listing is
    enough to build one (no object is read again)."""
    return f"{time_ns:020d}-{part.sha256}-{part.rows}{SUFFIX[fmt]}"


def parse_name(name: str) -> tuple[str, int] | None:
    """(sha256, rows) a part's name carries, or None when it is not one (an older ``-<hex8>-`` name
    has no checksum: "" then)."""
    base = name.rsplit("/", 1)[-1]
    for suffix in SUFFIX.values():
        if base.endswith(suffix):
            stem = base[: -len(suffix)]
            pieces = stem.split("-")
            if len(pieces) != 3 or not pieces[2].isdigit():
                return None
            digest = pieces[1] if len(pieces[1]) == 64 else ""
            return digest, int(pieces[2])
    return None
