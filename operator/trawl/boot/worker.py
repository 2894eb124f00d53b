"""What a ``trawl worker`` process does before it imports anything else (``trawl.entry``, ``trawl.cli``).

Every worker start, from zero or by the autoscaler, pays for its imports before its first claim, so such
a process turns the cyclic collector off while it imports, registers PyJWT to load on first use and has
aiohttp's CA-store loads run on a thread (docs/architecture.md, "Start-up").
"""

from __future__ import annotations

import gc
from pathlib import Path


def is_worker_invocation(argv: list[str]) -> bool:
    """Whether this process is ``trawl worker ...`` (the console script or ``python -m trawl.cli``).

    Such a process dispatches to the worker command only, so it skips importing the other commands
    (``trawl dev`` and the job tools pull rich, the local stack's process helpers, ...): every worker
    start pays for what the worker runs and nothing else.
    """
    return argv[1:2] == ["worker"] and Path(argv[0]).name in ("trawl", "cli.py")


def prepare() -> None:
    """Start-up settings of a worker process, before its imports (idempotent)."""
    # No cyclic garbage collection while the worker imports (it ran ~150 times for ~60k start-up objects,
    # a tenth of the import time); trawl.worker.main turns it back on after freezing what start-up made.
    gc.disable()
    from .lazyimport import defer

    defer("jwt")  # imported by redis-py, used only with token credentials: ~60 ms of every worker start

    from . import castore

    castore.import_aiohttp()  # its verified context's CA-store load runs on a thread while the rest imports
