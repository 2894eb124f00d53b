"""Fixed vs per-page cost of a crawl, from the site's request log and CPU samples of the crawler's processes.

The site (nginx) logs each request with its arrival time (``$msec``, unix seconds with ms). From the
arrival times of one run and the unix time at which the crawler's process was exec'd:

- ``first_request``: seconds from exec to the first request the site received (the fixed start-up cost:
  imports, client set-up, for Trawl the first claim from Redis);
- ``steady_pps``: pages/s over the middle 80 % of the requests (from the 10th to the 90th percentile
  arrival), which leaves out the ramp-up and the tail where fewer pages than the concurrency are left;
- ``steady_cpu_ms``: CPU ms per page over the same window, interpolated from periodic samples of the
  crawler's processes' CPU (for Trawl the worker, its parser processes and redis-server).

Pure functions beside one small sampling thread, so the figures are the same for every crawler.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STEADY_FROM, STEADY_TO = 0.10, 0.90  # the middle 80 % of a run's requests


@dataclass(frozen=True)
class Phases:
    requests: int
    first_request: float  # seconds from exec to the first request
    steady_pps: float
    steady_cpu_ms: float  # CPU ms per page in the steady window; nan without samples


def log_offset(path: Path) -> int:
    """Where the next run's requests start in the log (read before the run)."""
    return path.stat().st_size if path.exists() else 0


def request_times(path: Path, offset: int) -> list[float]:
    """Arrival times (unix seconds) of the HTML page requests logged after ``offset``, sorted."""
    with path.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode().splitlines()
    # robots.txt is not a page (no crawler here asks for it, but a default-on peer would)
    times = [float(line.split(" ", 1)[0]) for line in lines if line and "/robots.txt" not in line]
    return sorted(times)


class CpuSampler:
    """Samples ``read_cpu()`` (CPU seconds of the crawler's processes) every ``interval`` in a thread."""

    def __init__(self, read_cpu: Callable[[], float], interval: float = 0.02) -> None:
        self.read_cpu = read_cpu
        self.interval = interval
        self.samples: list[tuple[float, float]] = []  # (unix time, CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), self.read_cpu()))
            except (OSError, ValueError, IndexError):  # the process has ended: the samples so far stand
                return
            self._stop.wait(self.interval)

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.samples


def cpu_at(samples: list[tuple[float, float]], when: float) -> float:
    """CPU seconds at ``when``, linear between the two samples around it (clamped at the ends)."""
    times = [t for t, _ in samples]
    i = bisect.bisect_left(times, when)
    if i == 0:
        return samples[0][1]
    if i == len(samples):
        return samples[-1][1]
    (t0, c0), (t1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * ((when - t0) / (t1 - t0) if t1 > t0 else 0.0)


def phases(times: list[float], exec_at: float, samples: list[tuple[float, float]]) -> Phases:
    """The run's phases from its request arrival times, the exec time and the CPU samples."""
    n = len(times)
    if n < 10:
        raise ValueError(f"only {n} requests logged: the access log is off or the crawl failed")
    lo, hi = int(n * STEADY_FROM), int(n * STEADY_TO) - 1
    span = times[hi] - times[lo]
    pages = hi - lo
    cpu_ms = float("nan")
    if len(samples) >= 2 and samples[0][0] <= times[lo] and samples[-1][0] >= times[hi]:
        cpu_ms = (cpu_at(samples, times[hi]) - cpu_at(samples, times[lo])) / pages * 1000
    return Phases(
        requests=n,
        first_request=times[0] - exec_at,
        steady_pps=pages / span if span > 0 else float("inf"),
        steady_cpu_ms=cpu_ms,
    )
