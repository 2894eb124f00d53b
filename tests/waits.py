"""Waiting in a test for a condition to hold: one signature, a sync form (:func:`wait_for`) and an async one
(:func:`wait_for_async`), for every layer (tests/ is on sys.path: ``from waits import wait_for``).

``check`` is asked, then again every ``interval`` seconds, until it returns something truthy, which is
returned. Once ``timeout`` seconds have passed, the first false answer fails the wait with :class:`TimedOut`,
whose message names ``what``, the bound and the last answer (an exception listed in ``retry_on`` counts as
a false answer, and is the last answer), followed by ``diag()`` where one is given.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

TIMEOUT = 60.0
INTERVAL = 0.25


class TimedOut(AssertionError, TimeoutError):
    """A wait that ran out: a failed assertion to pytest, a TimeoutError to a caller that adds to the message."""


def _message(what: str, timeout: float, last: Any, extra: Any) -> str:
    text = f"timed out after {timeout:g} s waiting for {what}; last: {last!r}"
    return text if extra is None else f"{text}\n{extra}"


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    *,
    diag: Callable[[], Any] | None = None,
    retry_on: tuple[type[Exception], ...] = (),
) -> Any:
    """Until ``check()`` is truthy (returned); :class:`TimedOut` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = check()
        except retry_on as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise TimedOut(_message(what, timeout, last, diag() if diag is not None else None))
        time.sleep(interval)


async def wait_for_async(
    what: str,
    check: Callable[[], Any | Awaitable[Any]],
    timeout: float = TIMEOUT,  # noqa: ASYNC109 - the wait's bound, the same parameter as wait_for's
    interval: float = INTERVAL,
    *,
    diag: Callable[[], Any | Awaitable[Any]] | None = None,
    retry_on: tuple[type[Exception], ...] = (),
    runner: asyncio.Future[Any] | None = None,
) -> Any:
    """:func:`wait_for` in an event loop: ``check`` and ``diag`` may be plain or async callables. With
    ``runner`` (a worker's task): fail at once with it when it has ended, as the condition then never comes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = await _answer(check)
        except retry_on as exc:
            last = exc
        else:
            if last:
                return last
        if runner is not None and runner.done():
            raise AssertionError(runner)
        if time.monotonic() >= deadline:
            raise TimedOut(_message(what, timeout, last, await _answer(diag) if diag is not None else None))
        await asyncio.sleep(interval)


async def _answer(fn: Callable[[], Any | Awaitable[Any]]) -> Any:
    value = fn()
    if inspect.isawaitable(value):
        value = await value
    return value
