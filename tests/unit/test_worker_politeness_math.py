"""Adaptive delay and token batching (pure arithmetic)."""

from __future__ import annotations

from trawl.worker.politeness.adaptive import AdaptiveDelay
from trawl.worker.politeness.rate import burst_for, token_batch


def test_fast_healthy_site_gets_no_delay() -> None:
    d = AdaptiveDelay()
    for _ in range(50):
        d.observe(0.05, False)
    assert d.delay == 0.0


def test_delay_grows_with_latency_and_errors_then_decays() -> None:
    d = AdaptiveDelay()
    for _ in range(20):
        d.observe(3.0, False)
    slow = d.delay
    assert slow > 1.5
    for _ in range(5):
        d.observe(3.0, True)
    erring = d.delay
    assert erring > slow
    assert erring <= d.max_delay
    for _ in range(60):
        d.observe(0.05, False)
    assert d.delay < 0.01


def test_token_batches_are_single_at_low_rates() -> None:
    assert token_batch(5) == 1 and burst_for(5) == 1
    assert token_batch(2) == 1
    assert token_batch(200) == 10
    assert token_batch(10000) == 64


def test_a_slowdown_fades_with_time_once_the_site_recovers() -> None:
    d = AdaptiveDelay()
    d.observe(0.2, False, now=100.0)
    d.observe(30.0, True, now=101.0)  # one timeout
    assert d.delay_at(101.0) > 10  # a long pause right after it
    assert d.delay_at(101.0 + 4 * d.half_life) < 2.0  # a minute later, little is left without any new answer
    assert d.delay_at(101.0 + 10 * d.half_life) < 0.05
    d.observe(0.2, False, now=101.0 + 4 * d.half_life)
    assert d.delay_at(101.0 + 4 * d.half_life) < 2.0
