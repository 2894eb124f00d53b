"""Waiting on a condition inside an async test: the one helper of the integration tests that drive a worker."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def until(
    check: Callable[[], Any | Awaitable[Any]],
    *,
    what: str = "the condition",
    within: float = 30.0,
    runner: asyncio.Task[None] | None = None,
    poll: float = 0.02,
) -> Any:
    """Until ``check`` (a plain or an async callable) returns something truthy, which is returned; for at most
    ``within`` seconds. With ``runner`` (a worker's task): fail at once if it ended, as the condition then
    never comes."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if runner is not None:
            assert not runner.done(), runner
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(poll)
