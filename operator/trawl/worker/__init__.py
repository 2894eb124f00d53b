"""The scrape worker (`trawl worker`): claim loop, safe and polite fetching, extraction, crawl policy, sinks."""

from .runner import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig"]
