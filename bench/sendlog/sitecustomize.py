"""A diagnostic of ``bench/many_hosts.py`` (``--send-log``): the time each request of a ``trawl worker`` left
it, written as JSON ``[[monotonic seconds, host], ...]`` to ``$TRAWL_BENCH_SEND_LOG`` when the worker exits.

The farm's request log stamps an arrival with the kernel's receive timestamp (bench/farm_server.py; before,
with its own loop's clock, up to ~0.4 s late under load, which made some correctly spaced requests look
early). The worker's send times, on the same monotonic clock, are the same check from the other end: a
request the worker's spacing let out too close shows here; one bunched after it (the worker's loop late
between this handler and the socket write, on loopback the kernel stamps within that write) shows in the
farm's log only, and that is what a site would see. Loaded only into the benchmark's worker process
(``PYTHONPATH``), never into Trawl itself; it wraps the fetcher's request class (``fetch.spaced_request``):
a request's time is taken when aiohttp's ``send`` returns, after the politeness spacing's wait and the
write of its headers, in the same step of the loop as that write (nothing is awaited between them).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any

_PATH = os.environ.get("TRAWL_BENCH_SEND_LOG")

if _PATH and "worker" in sys.argv:
    import trawl.worker.fetch as _fetch

    _OUT: str = _PATH

    _SENDS: list[tuple[float, str]] = []
    _build = _fetch.spaced_request

    def _with_log(before_send: Any) -> Any:
        base: Any = _build(before_send)

        class Logged(base):  # type: ignore[misc, valid-type]
            async def send(self, conn: Any) -> Any:
                response = await super().send(conn)
                _SENDS.append((time.monotonic(), self.url.host))
                return response

        return Logged

    _fetch.spaced_request = _with_log

    def _dump() -> None:
        with open(_OUT, "w") as out:
            json.dump(_SENDS, out)

    atexit.register(_dump)
