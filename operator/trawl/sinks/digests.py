"""The sinks' record of written (job, URL) keys, in compact form: pure parts.

A record's key is the hex of a 16-byte blake2b digest of (job, URL) (:func:`trawl.sinks.base.record_key`).
Redis keeps the digest, not its 32 hex characters, in one hash per job (``J:res:keys:d``): the digest's
first 2 bytes name its bucket (a hash field, 65,536 at most), the other 14 are appended to the bucket's
value; field ``n`` counts the digests. A set of hex keys cost 77-91 bytes per record (a dict entry and an
sds string each); the hash costs the 14 bytes plus each bucket's own overhead (~56 bytes, so at most
~3.7 MB a job), shared by the tails in it: 42 bytes per record at 100,000 records, 19 at 1 M, 16 at 10 M
(docs/benchmarks.md, ``bench/sink_dedupe.py``). One hash keeps the job's record in its slot on a Redis
Cluster and leaves expiry, retention and deletion one key, as the set was. A bucket's value is searched
for a tail at a multiple of 14 bytes, so a lookup reads n/65,536 tails: ~2 KB at 10 M records. Reads are
plain ``HMGET``s searched here (:func:`written`); marks are a script (``lua/dedupe_lib.lua``) that appends
the tails not there yet, so two workers marking one bucket never lose a tail.

Two records of a job share a digest with probability about n²/2¹²⁹: 1.5e-19 for n = 1e10 records. That is
the chance a record is taken for written when it was not; the records' ``key`` field, which consumers
dedupe on, has the same collision chance already.

The set of hex keys older workers wrote (``J:res:keys``) is read beside the hash, never written, so a job
upgraded in flight neither loses nor rewrites a record (the scripts look a digest up there by its hex, so
a key that is not a digest's hex, which no Trawl worker makes, is not found there).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

DIGEST_BYTES = 16
BUCKET_BYTES = 2  # 65,536 buckets: ~150 tails (2 KB) each at 10 M records
COUNT_FIELD = "n"  # the hash field counting its digests (bucket fields are 2 bytes, so never "n")


def record_digest(key: str) -> bytes:
    """The 16 bytes Redis keeps for a record key: the digest itself when the key is its hex (every key
    :func:`trawl.sinks.base.record_key` makes), else a digest of the key."""
    if len(key) == 2 * DIGEST_BYTES:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.blake2b(key.encode(), digest_size=DIGEST_BYTES).digest()


def split(digest: bytes) -> tuple[bytes, bytes]:
    """A digest's bucket (the hash field) and the tail kept in the bucket's value (as the scripts split it)."""
    return digest[:BUCKET_BYTES], digest[BUCKET_BYTES:]


def holds(blob: bytes, tail: bytes) -> bool:
    """Whether a bucket's value holds the tail at a multiple of its length (a match across two tails is not
    one), as ``dd_holds`` in the scripts decides."""
    at = blob.find(tail)
    while at >= 0:
        if at % len(tail) == 0:
            return True
        at = blob.find(tail, at + 1)
    return False


def written(digests: Sequence[bytes], buckets: Mapping[bytes, bytes | None]) -> list[bool]:
    """For each digest, whether its bucket's value (``buckets``: bucket -> value, None when absent) holds it."""
    out = []
    for digest in digests:
        bucket, tail = split(digest)
        blob = buckets.get(bucket)
        out.append(blob is not None and holds(blob, tail))
    return out


def count(field: bytes | str | None) -> int:
    """The hash's count field as read (absent: 0)."""
    return int(field) if field is not None else 0
