"""The worker's event loop: uvloop where it is installed (a dependency on Linux and macOS), else asyncio's.

A worker's CPU per task is mostly event-loop and socket work around Redis round trips and fetches; uvloop
cuts about a sixth of it (docs/benchmarks.md, queue section). Everything the worker uses (aiohttp, redis-py,
subprocesses, signal handlers) runs on either loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop's loop when uvloop is importable."""
    try:
        import uvloop
    except ImportError:  # Windows, or a trimmed install: the standard loop works the same, a little slower
        return asyncio.run(main)
    return uvloop.run(main)
