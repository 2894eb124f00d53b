"""Where the hack/ build scripts cache what they build, by hack/lib.sh's rule: $TRAWL_CACHE_DIR, else
$XDG_CACHE_HOME/trawl, else ~/.cache/trawl. Tests find the tools `make test` builds (`make tools`,
`make lint`) there."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ROOT = Path(
    os.environ.get("TRAWL_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trawl"
)


def cached(pattern: str) -> Path | None:
    """The last (by name: the newest version) file under the cache matching ``pattern``; None if not built."""
    found = sorted(CACHE_ROOT.glob(pattern))
    return found[-1] if found else None
