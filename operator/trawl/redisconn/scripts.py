"""Lua scripts kept as files: ``<package>/lua/<name>.lua``, read once per process.

Every script Trawl runs on Redis is a file with a header naming its KEYS and ARGV. The queue's
transitions are loaded with the helpers of their shared library they use and the ``#!lua`` shebang
(:func:`trawl.queue.client.load_script_source`); the others (job notes, shard quotas, the Redis stream
sink, politeness and the circuit breaker) run as written, or with a library of their package in front.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def read_script(package: str, name: str, library: str | None = None) -> str:
    """The text of ``lua/<name>.lua`` in ``package`` (e.g. ``"trawl.queue"``), with ``lua/<library>.lua`` of
    the same package in front when given (helpers several of its scripts share: the sinks' dedupe)."""
    text = (resources.files(package) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
    return text if library is None else read_script(package, library) + "\n" + text
