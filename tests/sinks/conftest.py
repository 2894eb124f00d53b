"""Real sink servers for the sink layer: one PostgreSQL server per session on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trawl.dev.postgres_server import PostgresServer


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server
