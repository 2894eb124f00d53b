"""bench/crawl_phases.py: a crawl's first request, steady state and steady CPU from its request log."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from crawl_phases import cpu_at, log_offset, phases, request_times


def test_request_times_reads_only_the_run_after_the_offset_and_skips_robots(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    assert log_offset(log) == 0
    log.write_text("100.000 GET /old HTTP/1.1\n")
    offset = log_offset(log)
    with log.open("a") as f:
        f.write("101.500 GET /b HTTP/1.1\n101.250 GET /a HTTP/1.1\n101.300 GET /robots.txt HTTP/1.1\n")
    assert request_times(log, offset) == [101.25, 101.5]


def test_cpu_at_interpolates_between_samples_and_clamps_at_the_ends() -> None:
    samples = [(10.0, 1.0), (12.0, 3.0)]
    assert cpu_at(samples, 11.0) == pytest.approx(2.0)
    assert cpu_at(samples, 5.0) == 1.0
    assert cpu_at(samples, 20.0) == 3.0


def test_phases_leave_out_ramp_up_and_tail() -> None:
    # 10 slow requests at the start, 80 at 100/s, 10 slow ones at the end: the steady rate is the middle's
    times = [100.0 + i for i in range(10)] + [110.0 + i / 100 for i in range(80)] + [111.0 + i for i in range(10)]
    samples = [(t / 10, t / 10 * 0.5) for t in range(900, 1300)]  # half a CPU second per second
    p = phases(times, 99.5, samples)
    assert p.requests == 100
    assert p.first_request == pytest.approx(0.5)
    assert p.steady_pps == pytest.approx(100, rel=0.05)
    assert p.steady_cpu_ms == pytest.approx(5.0, rel=0.05)  # 0.5 CPU s/s over 100 pages/s


def test_phases_without_samples_covering_the_window_has_no_cpu_figure() -> None:
    p = phases([float(i) for i in range(20)], 0.0, [(5.0, 1.0)])
    assert math.isnan(p.steady_cpu_ms)
    with pytest.raises(ValueError):
        phases([1.0, 2.0], 0.0, [])
