"""bench/render_peers.py: every renderer of bench/render_throughput.py (Trawl's and the peers') is measured over
the same steady window: warm-up pages, the measured ones, and a tail still in flight when the window closes."""

from __future__ import annotations

import os

from render_peers import Meter, stream


def test_stream_is_warmup_measured_and_tail() -> None:
    urls = [f"u{i}" for i in range(60)]
    order = stream(urls, 8)
    assert order[:16] == urls[:16]  # the warm-up
    assert order[16:76] == urls  # the measured pages
    assert order[76:] == urls[:8]  # the tail: as many as are in flight at once
    assert len(order) == 60 + 3 * 8


def test_window_closes_at_the_last_measured_page_not_after_the_tail() -> None:
    meter = Meter(total=30, warmup=10, marker=f"no-such-browser-{os.getpid()}", tail=5)
    for _ in range(10):
        meter.page_done()
    assert meter.t0 > 0 and meter.t1 == 0  # the window opened at the warm-up's last page
    for _ in range(15):
        meter.page_done()
    closed_at = meter.t1
    assert closed_at > 0  # closed at page 25, while the tail's 5 pages still run
    for _ in range(5):
        meter.page_done()
    assert meter.t1 == closed_at  # the tail's pages are not counted
    result = meter.result("peer", 5)
    assert result["pages"] == 15
    assert result["cpu"] >= 0 and result["seconds"] >= 0


def test_a_window_without_tail_closes_at_the_last_page() -> None:
    meter = Meter(total=4, warmup=2, marker=f"no-such-browser-{os.getpid()}")
    for _ in range(3):
        meter.page_done()
    assert meter.t1 == 0
    meter.page_done()
    assert meter.t1 > 0
    assert meter.result("peer", 1)["pages"] == 2
