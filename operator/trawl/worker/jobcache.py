"""The jobs a worker has tasks of: each job's spec, read from the queue once and set up for its tasks.

A :class:`Job` is what every task of the job needs besides its URL: the parsed spec, the extractor, the
sink, the fetch limits and headers. The last ``MAX_JOBS`` jobs used are kept; a job whose spec is not
registered yet is asked for again by its next task, and a cancelled job is forgotten. A spec that does not
read (not JSON, or :class:`~.specread.BadSpec` from its parse) raises BadSpec: the task is dead-lettered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trawl.queue.model import QueueClient
from trawl.sinks.base import Sink

from .extract import Extractor
from .fetch import FetchLimits
from .jobsettings import RequestSettings, WorkerJobSpec, parse_worker_spec
from .specread import BadSpec

MAX_JOBS = 256


@dataclass
class Job:
    spec: WorkerJobSpec
    extractor: Extractor
    sink: Sink
    limits: FetchLimits


def fetch_limits(request: RequestSettings) -> FetchLimits:
    """A job's request settings as the fetcher's limits (the read and total timeouts are the job's timeout)."""
    return FetchLimits(
        max_bytes=request.max_response_bytes,
        max_redirects=request.max_redirects,
        connect_timeout=request.connect_timeout_seconds,
        read_timeout=request.timeout_seconds,
        total_timeout=request.timeout_seconds,
    )


def build_job(raw: dict[str, Any], sink_for: Callable[[WorkerJobSpec], Sink]) -> Job:
    spec = parse_worker_spec(raw)
    extractor = Extractor(spec.extract, need_links=spec.crawl is not None)
    return Job(spec, extractor, sink_for(spec), fetch_limits(spec.request))


class JobCache:
    def __init__(self, queue: QueueClient, sink_for: Callable[[WorkerJobSpec], Sink]) -> None:
        self.queue = queue
        self.sink_for = sink_for
        self._jobs: OrderedDict[str, Job] = OrderedDict()

    async def get(self, job_id: str) -> Job | None:
        """The job, set up on its first task here; None while the queue has no spec for it."""
        if job_id in self._jobs:
            self._jobs.move_to_end(job_id)
            return self._jobs[job_id]
        try:
            raw = await self.queue.job_spec(job_id)
        except ValueError as exc:  # stored, but not JSON: damaged, no use asking again
            raise BadSpec(f"spec: not JSON ({exc})"[:512]) from exc
        job = build_job(raw, self.sink_for) if raw is not None else None
        if job is not None:  # a missing spec is not cached: it may be registered a moment later
            self._jobs[job_id] = job
            while len(self._jobs) > MAX_JOBS:
                self._jobs.popitem(last=False)
        return job

    def forget(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
