"""Fixtures of the fault-injection suite (helpers in fault_harness.py); everything they start is stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_harness import HOST, Workers

from sites import bookstore_fixture


@pytest.fixture
def workers_factory(tmp_path: Path) -> Iterator[list[Workers]]:
    made: list[Workers] = []
    yield made
    for w in made:
        w.stop_all()


site = bookstore_fixture("function", host=HOST, latency=0.25)
