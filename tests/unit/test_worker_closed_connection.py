"""A connection closed under a task's Redis write is Redis trouble, not a crash (trawl.worker.pipeline)."""

from __future__ import annotations

import asyncio

import pytest

from trawl.worker.pipeline import closed_connection


def test_a_write_on_a_closed_transport_is_a_closed_connection() -> None:
    # uvloop's and asyncio's words for a write on a transport that closed (seen under a Redis Cluster failover)
    exc = RuntimeError(
        "unable to perform operation on <TCPTransport closed=True reading=False 0x1>; the handler is closed"
    )
    assert closed_connection(exc)


@pytest.mark.parametrize(
    "exc",
    [RuntimeError("something else went wrong"), ValueError("the handler is closed"), asyncio.CancelledError()],
)
def test_other_errors_are_not(exc: BaseException) -> None:
    assert not closed_connection(exc)
