"""The worker's event loop is uvloop where it is installed (it is a dependency on Linux)."""

from __future__ import annotations

import asyncio

from trawl.boot import eventloop


def test_worker_loop_is_uvloop() -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert eventloop.run(loop_module()).startswith("uvloop")
