"""Where finished WARC files go: a directory on a volume, or the pool's S3 bucket (the S3 sink's client).

A file is *published* in two steps: the WARC file whole (a volume: written under a dot-name and renamed; S3:
one PUT or a multipart upload, which the store shows only once complete), then its CDXJ index the same way.
Readers list only WARC files whose index exists, so a worker that dies between the two steps leaves a file
no reader sees, never a half-written one.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Protocol

from trawl.sinks.s3 import S3Target, client

INDEX_SUFFIX = ".cdxj"
WARC_SUFFIX = ".warc.gz"


class Store(Protocol):
    def publish(self, name: str, warc: Path, index: bytes) -> None: ...

    def names(self) -> list[str]: ...

    def read_index(self, name: str) -> bytes: ...

    def open_warc(self, name: str) -> contextlib.AbstractContextManager[IO[bytes]]: ...


def published(listing: list[str]) -> list[str]:
    """The WARC files of a listing that have their index (so were published whole), in name order."""
    present = set(listing)
    return sorted(n for n in listing if n.endswith(WARC_SUFFIX) and n + INDEX_SUFFIX in present)


class VolumeStore:
    """Files under ``root`` (one job's directory on a mounted volume)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _atomic(self, name: str, write: object) -> None:
        part = self.root / f".{name}.part"
        if isinstance(write, Path):
            shutil.copyfile(write, part)
        else:
            part.write_bytes(write)  # type: ignore[arg-type]
        with open(part, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(part, self.root / name)

    def publish(self, name: str, warc: Path, index: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._atomic(name, warc)
        self._atomic(name + INDEX_SUFFIX, index)

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return published([p.name for p in self.root.iterdir()])

    def read_index(self, name: str) -> bytes:
        return (self.root / (name + INDEX_SUFFIX)).read_bytes()

    @contextlib.contextmanager
    def open_warc(self, name: str) -> Iterator[IO[bytes]]:
        with open(self.root / name, "rb") as fh:
            yield fh


class S3Store:
    """Objects under ``<bucket>/<prefix>`` with the pool's S3 credentials and address rule."""

    def __init__(self, target: S3Target, prefix: str) -> None:
        self.target = target
        self.prefix = prefix
        self._client = client(target)

    def publish(self, name: str, warc: Path, index: bytes) -> None:
        # fput_object uploads a large file in parts: the object exists only once the upload completes.
        self._client.fput_object(self.target.bucket, self.prefix + name, str(warc), content_type="application/warc")
        self._client.put_object(
            self.target.bucket,
            self.prefix + name + INDEX_SUFFIX,
            io.BytesIO(index),
            len(index),
            content_type="text/plain",
        )

    def names(self) -> list[str]:
        objs = self._client.list_objects(self.target.bucket, prefix=self.prefix, recursive=False)
        return published([str(o.object_name)[len(self.prefix) :] for o in objs])

    def read_index(self, name: str) -> bytes:
        resp = self._client.get_object(self.target.bucket, self.prefix + name + INDEX_SUFFIX)
        try:
            return bytes(resp.read())
        finally:
            resp.close()
            resp.release_conn()

    @contextlib.contextmanager
    def open_warc(self, name: str) -> Iterator[IO[bytes]]:
        resp = self._client.get_object(self.target.bucket, self.prefix + name)
        try:
            yield resp  # type: ignore[misc]
        finally:
            resp.close()
            resp.release_conn()
