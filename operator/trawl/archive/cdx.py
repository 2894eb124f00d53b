"""The CDXJ index beside each WARC file: one line per response record, sorted, pywb's layout.

``<SURT key> <14-digit timestamp> {"url", "mime", "status", "digest", "length", "offset", "filename"}``:
``offset``/``length`` address the record's gzip member, so a lookup reads one member and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator

DEFAULT_PORTS = {"http": 80, "https": 443}


def surt(url: str) -> str:
    """The sort key of ``url`` (SURT without scheme, as pywb writes it): ``com,example)/path?query``."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower().rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    key = ",".join(reversed(host.split(".")))
    if parts.port is not None and parts.port != DEFAULT_PORTS.get(parts.scheme.lower()):
        key += f":{parts.port}"
    path = parts.path or "/"
    return f"{key}){path}" + (f"?{parts.query}" if parts.query else "")


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    timestamp: str
    fields: dict[str, Any]

    def line(self) -> str:
        return f"{self.key} {self.timestamp} {json.dumps(self.fields, separators=(',', ':'), sort_keys=True)}"


def timestamp14(warc_date: str) -> str:
    """``2026-11-28T09:52:20.123456Z`` -> ``20261128095220``."""
    return "".join(ch for ch in warc_date if ch.isdigit())[:14]


def index_stream(stream: IO[bytes], filename: str) -> list[Entry]:
    """One entry per response record of a WARC stream (every record is read: a broken file raises)."""
    entries: list[Entry] = []
    it = ArchiveIterator(stream)
    for record in it:
        if record.rec_type != "response":
            continue
        headers = record.rec_headers
        http = record.http_headers
        url = str(headers.get_header("WARC-Target-URI"))
        fields: dict[str, Any] = {
            "url": url,
            "mime": (http.get_header("Content-Type") or "").split(";", 1)[0].strip() if http else "",
            "status": http.get_statuscode() if http else "",
            "digest": headers.get_header("WARC-Payload-Digest") or "",
            "filename": filename,
        }
        it.read_to_end(record)
        fields["offset"] = str(it.get_record_offset())
        fields["length"] = str(it.get_record_length())
        entries.append(Entry(surt(url), timestamp14(str(headers.get_header("WARC-Date"))), fields))
    return sorted(entries, key=lambda e: (e.key, e.timestamp))


def render(entries: Iterable[Entry]) -> bytes:
    return "".join(e.line() + "\n" for e in entries).encode()


def parse(data: bytes) -> Iterator[Entry]:
    for line in data.decode().splitlines():
        if not line.strip():
            continue
        key, ts, fields = line.split(" ", 2)
        yield Entry(key, ts, json.loads(fields))


def lookup(entries: Iterable[Entry], url: str) -> list[Entry]:
    """The entries of ``url`` (by its SURT key), oldest first."""
    key = surt(url)
    return sorted((e for e in entries if e.key == key), key=lambda e: e.timestamp)
