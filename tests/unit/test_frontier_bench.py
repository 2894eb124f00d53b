"""bench/frontier.py: the dedupe key's memory is measured without walking a large set (which blocks a master);
a site crawl's steady window (--crawl-pages)."""

from __future__ import annotations

import pytest

from frontier import DEDUPE_SAMPLES, WALK_MAX_MEMBERS, Sample, crossing, dedupe_usage, steady


class FakeRedis:
    """MEMORY USAGE, TYPE and SCARD of one key; records the SAMPLES of every MEMORY USAGE call."""

    def __init__(self, kind: bytes, members: int, sampled: int, walked: int) -> None:
        self.kind, self.members, self.sampled, self.walked = kind, members, sampled, walked
        self.samples: list[int] = []

    async def memory_usage(self, key: str, samples: int | None = None) -> int:
        assert samples is not None  # redis-server's default is 5; the bench always says which
        self.samples.append(samples)
        return self.walked if samples == 0 else self.sampled

    async def type(self, key: str) -> bytes:
        return self.kind

    async def scard(self, key: str) -> int:
        assert self.kind == b"set"
        return self.members


async def test_a_large_set_is_sampled_never_walked() -> None:
    r = FakeRedis(b"set", WALK_MAX_MEMBERS + 1, sampled=186_331_752, walked=186_331_752)
    assert await dedupe_usage(r, "seen") == 186_331_752
    assert r.samples == [DEDUPE_SAMPLES]
    assert 0 < DEDUPE_SAMPLES <= 10_000


async def test_a_small_set_is_walked_too_and_the_estimate_checked() -> None:
    r = FakeRedis(b"set", WALK_MAX_MEMBERS, sampled=1_000_000, walked=1_005_000)
    assert await dedupe_usage(r, "seen") == 1_000_000
    assert r.samples == [DEDUPE_SAMPLES, 0]
    off = FakeRedis(b"set", 1000, sampled=1_000_000, walked=1_200_000)
    with pytest.raises(SystemExit, match="estimate is off"):
        await dedupe_usage(off, "seen")


async def test_a_filter_string_needs_no_walk() -> None:
    r = FakeRedis(b"string", 0, sampled=33_554_480, walked=33_554_480)
    assert await dedupe_usage(r, "bloom") == 33_554_480
    assert r.samples == [DEDUPE_SAMPLES]


def samples_of(points: list[tuple[float, int]], cpu_per_page: float = 0.001) -> list[Sample]:
    """Samples at (seconds, pages done); the worker's CPU is ``cpu_per_page`` a page, Redis's a tenth, the site's a
    twentieth."""
    return [Sample(t, d, d * cpu_per_page, d * cpu_per_page / 10, d * cpu_per_page / 20) for t, d in points]


def test_the_steady_window_leaves_out_the_start_and_the_tail() -> None:
    # 1,000 pages: a slow start (100 pages in 10 s), then 100 pages/s, then a slow tail (100 pages in 10 s)
    points = [(0.0, 0), (10.0, 100)] + [(10.0 + k, 100 + 100 * k) for k in range(1, 9)] + [(28.0, 1000)]
    s = steady(samples_of(points), 1000)
    assert s.pages_per_s == pytest.approx(100.0)
    assert (s.worker_ms, s.redis_ms, s.site_ms) == pytest.approx((1.0, 0.1, 0.05))


def test_the_window_is_interpolated_between_samples() -> None:
    samples = samples_of([(0.0, 0), (4.0, 40), (6.0, 100)])  # 10/s, then 30/s; the 10 % mark at 1 s
    assert crossing(samples, 10).at == pytest.approx(1.0)
    assert crossing(samples, 70).at == pytest.approx(5.0)
    assert crossing(samples, 70).worker == pytest.approx(0.07)
    assert crossing(samples_of([(0.0, 0), (1.0, 5), (2.0, 5), (3.0, 10)]), 5).at == 1.0  # first reached
    with pytest.raises(ValueError, match="never reach"):
        crossing(samples, 101)
    s = steady(samples, 100)  # pages 10 to 90: 1 s to 5 + 20/30 s
    assert s.pages_per_s == pytest.approx(80 / (5 + 2 / 3 - 1))
