"""bench/host_farm.py: the many-hosts farm's hosts, its theoretical maximum and the check of its request log."""

from __future__ import annotations

import pytest

from host_farm import (
    KINDS,
    Arrival,
    address,
    concurrency_violations,
    handler_clock,
    handler_delays,
    index_of,
    limit_of,
    limit_sum,
    pages_per_host,
    quantile,
    rate_violations,
    send_violations,
    theoretical,
    violations,
)


def test_addresses_are_loopback_and_map_back_to_their_host() -> None:
    for i in (0, 1, 249, 250, 9999):
        a = address(i)
        assert a.startswith("127.1.") and not a.endswith((".0", ".255"))
        assert index_of(a) == i
    assert index_of("127.0.0.1") is None
    assert index_of("127.1.0.0") is None


def test_the_theoretical_maximum_is_the_sum_of_allowed_rates_capped_by_the_machine() -> None:
    # 10 hosts: 8 fast (2/s), 1 slow (2 at a time over 1.5 s: 1.33/s), 1 hard (0.5/s).
    assert limit_sum(10) == pytest.approx(8 * 2 + 2 / 1.5 + 0.5)
    assert theoretical(10, 1000.0) == pytest.approx(limit_sum(10))
    assert theoretical(10_000, 500.0) == 500.0
    assert limit_of(7).allowed == pytest.approx(KINDS["slow"].concurrency / KINDS["slow"].latency)


def test_pages_per_host_cover_the_window_and_shrink_where_the_cap_binds() -> None:
    uncapped = pages_per_host(10, 40, 1e9)
    assert uncapped[0] == 2 * 40 + 2 and uncapped[3] == 20 + 2
    capped = pages_per_host(10_000, 40, 300.0)
    assert max(capped) < max(uncapped) and min(capped) >= 3


def test_an_exactly_spaced_stream_conforms_and_jitter_below_tau_is_tolerated() -> None:
    assert rate_violations(1, [0.0, 0.5, 1.0, 1.5], 2.0) == []
    assert rate_violations(1, [0.0, 0.5, 0.96, 1.5], 2.0) == []  # 40 ms early, once
    # Late, then on time: the gap is 80 ms short, more than tau (the site sees two requests too close).
    assert len(rate_violations(1, [0.0, 0.58, 1.0], 2.0)) == 1


def test_a_sustained_excess_however_small_is_caught() -> None:
    arrivals = [i * 0.49 for i in range(20)]  # 2 % above 2/s
    bad = rate_violations(1, arrivals, 2.0)
    assert bad and bad[0].what == "rate"


def test_a_burst_is_a_violation() -> None:
    assert len(rate_violations(1, [0.0, 0.1, 0.2], 2.0)) == 2


def test_the_check_runs_on_kernel_arrivals_and_the_handler_clock_shows_what_the_farms_lateness_did() -> None:
    # Sent 0.6 s apart (2/s allows 0.5); the farm's loop stalled and handled the first 0.45 s late.
    log = {0: [Arrival(10.0, 1, 10.45), Arrival(10.6, 1, 10.601)]}
    assert violations(log) == []
    assert handler_clock(log) == {0: [Arrival(10.45, 1, 10.45), Arrival(10.601, 1, 10.601)]}
    bad = violations(handler_clock(log))
    assert [(v.host, v.what) for v in bad] == [(0, "rate")]
    assert handler_delays(log) == pytest.approx([0.001, 0.45])


def test_quantile_is_the_nearest_rank() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert quantile(xs, 0.99) == 99.0
    assert quantile(xs, 1.0) == 100.0
    assert quantile([0.2], 0.99) == 0.2
    assert quantile([], 0.99) == 0.0


def test_concurrency_above_the_limit_is_a_violation() -> None:
    assert concurrency_violations(1, [(0.0, 1), (0.1, 2), (0.2, 3)], 2)[0].at == 0.2


def test_violations_reads_each_hosts_limit() -> None:
    log = {3: [Arrival(0.0, 1, 0.0), Arrival(1.0, 1, 1.0)], 0: [Arrival(0.0, 1, 0.0), Arrival(0.5, 2, 0.5)]}
    bad = violations(log)  # hard host 3 at 1/s (limit 0.5/s)
    assert [(v.host, v.what) for v in bad] == [(3, "rate")]
    assert [(v.host, v.what) for v in violations({0: [Arrival(0.0, 1, 0.0), Arrival(0.6, 3, 0.6)]})] == [
        (0, "concurrency")
    ]


def test_send_violations_check_the_senders_own_clock_per_host() -> None:
    fast, hard = 0, 3  # host indices of each kind (kind_of)
    spaced = [(i * 0.53, address(fast)) for i in range(5)] + [(i * 2.1, address(hard)) for i in range(3)]
    assert send_violations(spaced) == []
    crowded = [*spaced, (4.2 + 1.0, address(hard))]  # 1.0 s after the hard host's last: above its 0.5/s
    bad = send_violations(crowded)
    assert [(v.host, v.what) for v in bad] == [(hard, "rate")]
    assert send_violations([(0.0, "127.0.0.1"), (0.01, "127.0.0.1")]) == []  # not a farm host: not checked
