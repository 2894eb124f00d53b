"""The scrape worker (`trawl worker`): claim loop, safe and polite fetching, extraction, crawl policy, sinks.

``Worker`` and ``WorkerConfig`` are loaded on first use (PEP 562), not when a submodule is imported: a
parser process (:mod:`trawl.worker.parsepool`, spawned) imports the parsing modules only, not the claim
loop, redis-py, aiohttp, prometheus_client and the sinks it never runs (docs/architecture.md, "Start-up").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import WorkerConfig
    from .runner import Worker

__all__ = ["Worker", "WorkerConfig"]


def __getattr__(name: str) -> Any:
    if name == "Worker":
        from .runner import Worker

        return Worker
    if name == "WorkerConfig":
        from .config import WorkerConfig

        return WorkerConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
