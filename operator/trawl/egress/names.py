"""Name resolution for the names a job author chooses: on a bounded thread pool of its own, with a timeout.

``getaddrinfo`` blocks a thread until the system resolver answers or gives up (seconds per server and
attempt, longer for a name whose servers never answer). On the event loop's default executor, a few
jobs naming such hosts would hold every thread of it, and everything else that resolves there (Redis
reconnects, the Kubernetes client) would wait behind them. Here they hold at most :data:`THREADS`
threads of their own, and the caller stops waiting after ``timeout`` seconds (the thread it leaves
finishes when the resolver gives up; a thread cannot be interrupted, only bounded).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import socket
from typing import Any

THREADS = 16
RESOLVE_SECONDS = 10.0

AddrInfo = tuple[Any, ...]  # (family, type, proto, canonname, sockaddr), as socket.getaddrinfo returns

_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:  # threads start on first use (a worker that never resolves a job's name starts none)
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="trawl-resolve")
    return _pool


def _lookup(host: str, port: int, family: int, flags: int) -> list[AddrInfo]:
    return socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, flags)


def _no_answer(host: str, seconds: float) -> OSError:
    return OSError(f"cannot resolve {host}: no answer within {seconds:g} s")


async def getaddrinfo(
    host: str, port: int, *, family: int = 0, flags: int = 0, seconds: float = RESOLVE_SECONDS
) -> list[AddrInfo]:
    """``socket.getaddrinfo`` for stream sockets, off the loop's default executor; ``OSError`` when no
    answer came within ``seconds`` (``socket.gaierror``, an ``OSError``, when the name does not resolve)."""
    future = asyncio.get_running_loop().run_in_executor(
        _executor(), functools.partial(_lookup, host, port, family, flags)
    )
    try:
        async with asyncio.timeout(seconds):
            return await future
    except TimeoutError:
        raise _no_answer(host, seconds) from None


def getaddrinfo_blocking(
    host: str, port: int, *, family: int = 0, flags: int = 0, seconds: float = RESOLVE_SECONDS
) -> list[AddrInfo]:
    """The same for code running in a thread of its own (the S3 client's connections)."""
    future = _executor().submit(_lookup, host, port, family, flags)
    try:
        return future.result(seconds)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise _no_answer(host, seconds) from None
