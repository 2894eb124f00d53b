"""Placement of a sharded pool: shard hash tags on distinct N-ths of the slot ring, URLs placed stably."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from trawl.queue.keys import Keys, pool_prefix
from trawl.queue.sharded import SLOTS, shard_of, shard_prefixes


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 8])
def test_shards_take_one_nth_of_the_slot_ring_each(shards: int) -> None:
    for i in range(200):
        prefix = pool_prefix("team", f"pool-{i}")
        prefixes = shard_prefixes(prefix, shards)
        assert prefixes[0] == prefix  # the home keeps the pool's usual keys
        assert prefixes == shard_prefixes(prefix, shards)  # names only: every process agrees
        segments = {key_slot(p.encode()) * shards // SLOTS for p in prefixes}
        assert len(segments) == shards
        for p in prefixes:
            Keys(p)  # each has a hash tag


def test_urls_are_placed_stably_and_evenly() -> None:
    urls = [f"https://shop.example/p/{i}" for i in range(30_000)]
    counts = [0, 0, 0]
    for url in urls:
        counts[shard_of(url, 3)] += 1
        assert shard_of(url, 3) == shard_of(url, 3)
    assert all(9_500 < c < 10_500 for c in counts), counts


def test_shard_count_bounds() -> None:
    with pytest.raises(ValueError):
        shard_prefixes("trawl:{a/b}", 0)
    with pytest.raises(ValueError):
        shard_prefixes("trawl:{a/b}", 17)
