"""A crawl's probabilistic dedupe tier (spec.crawl.bloomFilter), sized here and run in the queue's scripts.

Exact within-job dedupe keeps a 12-byte digest per seen URL in a Redis set: about 65 bytes of Redis per URL
(650 MB for a 10-million-URL crawl). A Bloom filter of ``m`` bits and ``k`` hashes sized for the job's task
cap ``n`` at false-positive rate ``p`` costs ``-n ln p / (ln 2)^2`` bits (1.8 bytes per URL at p = 0.001)
and may, at rate at most ``p``, take a new URL for one already seen: that page is skipped. The filter is a
Redis string in the job's slot (SETBIT / GETBIT in lib.lua's add_urls: cluster-safe), sized for the job's
cap so the rate holds up to it; the scripts add each check's false-positive probability at the filter's fill
then, so the job's status shows how many pages were possibly skipped (an expected count, an upper bound:
checks of URLs really seen count too). It is never used unless the job asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_BITS = 2**32  # a Redis string holds at most 512 MB
MIN_RATE, MAX_RATE = 0.0001, 0.1


@dataclass(frozen=True, slots=True)
class BloomSize:
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
    """The filter for ``capacity`` URLs at false-positive rate ``rate`` (raises ValueError beyond MAX_BITS)."""
    if capacity < 1 or not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"a Bloom filter needs a capacity >= 1 and a rate in [{MIN_RATE:g}, {MAX_RATE:g}]")
    bits = max(64, math.ceil(-capacity * math.log(rate) / math.log(2) ** 2))
    if bits > MAX_BITS:
        raise ValueError(f"a Bloom filter for {capacity} URLs at rate {rate:g} needs {bits} bits (at most {MAX_BITS})")
    hashes = max(1, round(bits / capacity * math.log(2)))
    return BloomSize(bits, min(hashes, 30))


def false_positive_rate(size: BloomSize, inserted: int) -> float:
    """The chance that a new URL is taken for a seen one after ``inserted`` insertions."""
    return float((1.0 - math.exp(-size.hashes * inserted / size.bits)) ** size.hashes)
