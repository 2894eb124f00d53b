"""Placement of a sharded pool: shard hash tags on distinct N-ths of the slot ring, URLs placed stably."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from trawl.queue.keys import Keys, pool_prefix
from trawl.queue.sharded import SLOTS, place, seed_parts, shard_of, shard_prefixes


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


@pytest.mark.parametrize("present", [[True, True, True], [True, False, True], [True]])
def test_seeds_placed_batch_by_batch_land_where_the_whole_list_put_them(present: list[bool]) -> None:
    """Issue 32: the operator enqueues a job's seeds a batch at a time (never the whole list in memory).
    Each URL still gets the shard, and the index on that shard, that placing the whole list in one call
    gave it, so a pass resuming from the shards' cursors adds exactly what is missing."""
    import random

    urls = [f"https://shop.example/p/{i}" for i in range(5000)] + ["https://shop.example/p/7"] * 3
    whole = {i: list(enumerate(part)) for i, part in place(urls, present).items()}
    rng = random.Random(32)
    cursors = [0] * len(present)
    got: dict[int, list[tuple[int, str]]] = {}
    position = 0
    while position < len(urls):
        batch = urls[position : position + rng.randint(1, 700)]
        parts, cursors = seed_parts(batch, present, cursors)
        for i, (start, part) in parts.items():
            got.setdefault(i, []).extend(enumerate(part, start=start))
        position += len(batch)
    assert got == whole
    assert cursors == [len(whole.get(i, [])) for i in range(len(present))]
    # Every URL on the shard of its hash (the home when the job is not on that shard), as before.
    for i, part in whole.items():
        assert all((shard_of(u, len(present)) if present[shard_of(u, len(present))] else 0) == i for _, u in part)
