"""bench/frontier.py: the dedupe key's memory is measured without walking a large set (which blocks a master)."""

from __future__ import annotations

import pytest

from frontier import DEDUPE_SAMPLES, WALK_MAX_MEMBERS, dedupe_usage


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
