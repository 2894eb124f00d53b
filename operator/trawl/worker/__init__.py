"""The scrape worker (`trawl worker`): claim loop, safe and polite fetching, extraction, crawl policy, sinks."""

from .config import WorkerConfig
from .runner import Worker

__all__ = ["Worker", "WorkerConfig"]
