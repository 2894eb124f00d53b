"""Real sink servers for the sink layer, one of each per session on free loopback ports: PostgreSQL, MinIO."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trawl.dev.postgres_server import PostgresServer
from trawl.dev.s3_server import S3Server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server
