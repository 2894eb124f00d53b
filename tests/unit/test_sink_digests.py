"""The sinks' compact record of written keys: a record key's digest and its bucket."""

from __future__ import annotations

import hashlib

from trawl.queue.keys import Keys, digests_key
from trawl.sinks.base import packed_digests, record_key
from trawl.sinks.digests import COUNT_FIELD, DIGEST_BYTES, count, holds, record_digest, split, written


def test_a_record_key_is_kept_as_the_16_bytes_it_is_the_hex_of() -> None:
    key = record_key("job", "https://a.test/x")
    assert record_digest(key) == bytes.fromhex(key) and len(record_digest(key)) == DIGEST_BYTES


def test_a_key_that_is_not_a_digest_is_digested() -> None:
    for key in ("k1", "z" * 32, "0" * 31, "0" * 34):
        assert record_digest(key) == hashlib.blake2b(key.encode(), digest_size=16).digest()
    assert record_digest("z" * 32) != record_digest("y" * 32)


def test_the_bucket_is_the_first_two_bytes_and_the_tail_the_rest() -> None:
    digest = bytes(range(16))
    bucket, tail = split(digest)
    assert (bucket, tail) == (b"\x00\x01", bytes(range(2, 16)))
    assert len(COUNT_FIELD) != len(bucket)  # the count field is never a bucket


def test_the_scripts_get_the_digests_packed_in_order() -> None:
    key = record_key("j", "u")
    assert packed_digests([key, "k"]) == bytes.fromhex(key) + record_digest("k")
    assert packed_digests([]) == b""


def test_count_reads_an_absent_field_as_zero() -> None:
    assert (count(None), count(b"12"), count("3")) == (0, 12, 3)


def test_the_digest_hash_lives_in_the_job_slot_beside_the_legacy_set() -> None:
    keys = Keys("trawl:{ns/pool}")
    assert keys.results_digests("j") == digests_key(keys.results_written("j")) == "trawl:{ns/pool}:j:j:res:keys:d"
    assert keys.results_pending("j") == "trawl:{ns/pool}:j:j:res:keys:s3pending"  # unchanged by the upgrade


def test_a_tail_counts_only_where_a_tail_starts() -> None:
    a, b = b"A" * 7 + b"B" * 7, b"C" * 7 + b"D" * 7
    assert holds(a + b, a) and holds(a + b, b)
    assert not holds(a + b, b"B" * 7 + b"C" * 7)  # found at byte 7: across two tails
    assert holds(a + b + b"B" * 7 + b"C" * 7, b"B" * 7 + b"C" * 7)  # found across two, then where one starts
    assert not holds(b"", a)


def test_written_reads_each_digest_in_its_bucket() -> None:
    one, two, three = bytes(range(16)), bytes(range(1, 17)), bytes([0, 1]) + bytes(14)
    buckets = {one[:2]: one[2:], two[:2]: None}
    assert written([one, two, three], buckets) == [True, False, False]
