"""Lua scripts kept as files: ``<package>/lua/<name>.lua``, read once per process.

Every script Trawl runs on Redis is a file with a header naming its KEYS and ARGV. The queue's
transitions are loaded with the helpers of their shared library they use and the ``#!lua`` shebang
(:func:`trawl.queue.client.load_script_source`); the others (job notes, shard quotas, the Redis stream
sink, politeness and the circuit breaker) run as written.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def read_script(package: str, name: str) -> str:
    """The text of ``lua/<name>.lua`` in ``package`` (e.g. ``"trawl.queue"``)."""
    return (resources.files(package) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
