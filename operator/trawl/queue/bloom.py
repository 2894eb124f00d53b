"""A crawl's probabilistic dedupe tier (spec.crawl.bloomFilter), sized here and run in the queue's scripts.

Exact within-job dedupe keeps a 12-byte digest per seen URL in a Redis set: 48-60 bytes of Redis per URL
(574 MB for a 10-million-URL crawl, bench/frontier.py). A Bloom filter of ``m`` bits and ``k`` hashes
(k at most MAX_HASHES) sized for the job's task cap ``n`` at false-positive rate ``p`` costs
``-k n / ln(1 - p^(1/k))`` bits (2 bytes per URL at p = 0.001, 3.1 at 0.0001) and may, at rate at most
``p``, take a new URL for one already seen: that page is skipped. The filter is a Redis string in the job's
slot (one BITFIELD per URL in lib.lua's bloom_add: cluster-safe), sized for the job's cap so the rate holds
up to it; the scripts add each check's false-positive probability at the filter's fill then, so the job's
status shows how many pages were possibly skipped (an expected count, an upper bound: checks of URLs
really seen count too). It is never used unless the job asks.
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

MAX_BITS = 2**32  # a Redis string holds at most 512 MB
MIN_RATE, MAX_RATE = 0.0001, 0.1
# Bits set (and read) per URL. The optimum is log2(1/p) (10 at 0.001, 13 at 0.0001), but each bit is an
# operation of the script's BITFIELD, and bench/frontier.py measured the filter's Redis CPU per URL at 2-3x
# the exact set's with 13: six, with the bits that keep the rate, costs 10 % more memory at 0.001 (15.8
# bits per URL) and 29 % more at 0.0001 (24.7 bits, 3.1 bytes), still far below the exact set's ~65 bytes.
MAX_HASHES = 6


class BloomSize(NamedTuple):
    bits: int
    hashes: int

    @property
    def bytes(self) -> int:
        return (self.bits + 7) // 8

    def wire(self) -> str:
        """As the job hash keeps it ('bf'): "<bits>|<hashes>"."""
        return f"{self.bits}|{self.hashes}"

    @classmethod
    def parse(cls, raw: str | None) -> BloomSize | None:
        if not raw or "|" not in raw:
            return None
        bits, hashes = raw.split("|", 1)
        return cls(int(bits), int(hashes))


def size_for(capacity: int, rate: float) -> BloomSize:
    """The filter for ``capacity`` URLs at false-positive rate ``rate`` (raises ValueError beyond MAX_BITS).

    At most MAX_HASHES bits per URL, with the bits that keep the rate at that count (``m = -k n / ln(1 -
    p^(1/k))``; the textbook ``-n ln p / (ln 2)^2`` when the optimal count ``log2(1/p)`` is within it)."""
    if capacity < 1 or not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"a Bloom filter needs a capacity >= 1 and a rate in [{MIN_RATE:g}, {MAX_RATE:g}]")
    hashes = max(1, min(MAX_HASHES, round(-math.log2(rate))))
    bits = max(64, math.ceil(-hashes * capacity / math.log(1.0 - rate ** (1.0 / hashes))))
    if bits > MAX_BITS:
        raise ValueError(f"a Bloom filter for {capacity} URLs at rate {rate:g} needs {bits} bits (at most {MAX_BITS})")
    return BloomSize(bits, hashes)


def false_positive_rate(size: BloomSize, inserted: int) -> float:
    """The chance that a new URL is taken for a seen one after ``inserted`` insertions."""
    return float((1.0 - math.exp(-size.hashes * inserted / size.bits)) ** size.hashes)


def positions(item: str, size: BloomSize) -> list[int]:
    """The bits lib.lua's bloom_add sets for ``item`` (the same double hashing of its SHA-1), so a filter
    read back from Redis can be probed without changing it (bench/frontier.py measures its false positives)."""
    digest = hashlib.sha1(item.encode()).hexdigest()
    h1, h2 = int(digest[:8], 16), int(digest[8:16], 16)
    h2 = h2 + 1 - h2 % 2
    return [(h1 + i * h2) % size.bits for i in range(size.hashes)]


def contains(filter_bytes: bytes, item: str, size: BloomSize) -> bool:
    """Whether the filter (a Redis string as SETBIT wrote it: bit 0 is the first byte's high bit) says
    ``item`` was seen; bits beyond the string's end are clear."""
    for bit in positions(item, size):
        byte = bit >> 3
        if byte >= len(filter_bytes) or not filter_bytes[byte] & (0x80 >> (bit & 7)):
            return False
    return True
