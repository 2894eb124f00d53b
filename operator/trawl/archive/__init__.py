"""WARC capture and re-extraction: the raw responses a job fetched, kept as gzip WARC files with a CDXJ index.

- :mod:`.records`: one fetched response as a WARC request + response record pair (payload digest, size cap).
- :mod:`.writer`: rotating WARC files written under a temporary name and published whole.
- :mod:`.stores`: where published files go (a volume directory, or the pool's S3 bucket).
- :mod:`.cdx`: the CDXJ index beside each file, and lookups in it.
- :mod:`.reader`: the archived responses back, digests checked (re-extraction reads them).
- :mod:`.source`: which archive a job may name as its source (its own namespace only, no paths out).
"""
