"""Import redis-py without ``importlib.metadata``: it reads its own version six times at import.

redis-py's package ``__init__`` calls ``importlib.metadata.version("redis")`` for ``__version__``, and
five of its client and connection classes call it again for a default argument (``lib_version``, sent
with ``CLIENT SETINFO``). Each call searches ``sys.path`` for the distribution and parses its whole
``METADATA`` file with the ``email`` package, and the first one imports ``importlib.metadata`` itself
(with ``zipfile``, ``csv`` and their imports): together a few per cent of a worker's start-up, spent on
a string a worker never reads.

:func:`import_redis` reads that version once from the ``Version:`` header of the ``redis-*.dist-info``
beside the imported package (the field ``version()`` returns) and imports redis-py with a stand-in for
``importlib.metadata`` that answers ``version("redis")`` with it; every other name and attribute goes to
the real module (imported then). The stand-in is in ``sys.modules`` only while redis-py imports; its
modules keep it as their ``metadata``, which gives the same answers. When the version cannot be read so
(no single dist-info beside the package, no ``Version:`` header), redis-py imports as usual.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from typing import Any

_NAME = "redis"
_PREFIX = _NAME + "-"


def dist_info_version(package_dir: str) -> str | None:
    """The ``Version:`` header of the single ``redis-<version>.dist-info/METADATA`` in the directory that
    holds ``package_dir`` (site-packages), or None when there is not exactly one such directory or no
    header (an unusual install: the caller imports redis-py as usual then)."""
    site = os.path.dirname(os.path.abspath(package_dir))
    try:
        found = [n for n in os.listdir(site) if n.startswith(_PREFIX) and n.endswith(".dist-info")]
        if len(found) != 1:
            return None
        with open(os.path.join(site, found[0], "METADATA"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.removeprefix("Version:").strip() or None
                if not line.strip():  # end of the headers
                    return None
    except (OSError, UnicodeDecodeError):
        return None
    return None


class _Metadata(types.ModuleType):
    """``importlib.metadata`` for redis-py's import: its version known, everything else the real module's."""

    def __init__(self, redis_version: str) -> None:
        super().__init__("importlib.metadata")
        self._redis_version = redis_version

    def version(self, distribution_name: str) -> str:
        if distribution_name == _NAME:
            return self._redis_version
        return str(_real().version(distribution_name))

    def __getattr__(self, attr: str) -> Any:  # PackageNotFoundError, distribution, ...: the real module's
        return getattr(_real(), attr)


def _real() -> types.ModuleType:
    """The real ``importlib.metadata`` (imported now if it was not); the stand-in, if still registered
    (redis-py asked for something else while it imports), leaves ``sys.modules`` first."""
    if isinstance(sys.modules.get("importlib.metadata"), _Metadata):
        del sys.modules["importlib.metadata"]
        importlib.__dict__.pop("metadata", None)
    return importlib.import_module("importlib.metadata")


def import_redis() -> bool:
    """Import redis-py (``redis`` and, through its ``__init__``, every client) with its version read
    once from its dist-info; True when the stand-in was used, False when redis-py imported as usual
    (loaded already, or its version not readable that way)."""
    if _NAME in sys.modules:
        return False
    spec = importlib.util.find_spec(_NAME)
    locations = spec.submodule_search_locations if spec is not None else None
    version = dist_info_version(locations[0]) if locations else None
    if version is None:
        importlib.import_module(_NAME)
        return False
    saved_module = sys.modules.get("importlib.metadata")
    saved_attr = importlib.__dict__.get("metadata")
    stand_in = _Metadata(version)
    sys.modules["importlib.metadata"] = stand_in
    importlib.__dict__["metadata"] = stand_in  # `from importlib import metadata` reads the attribute first
    try:
        importlib.import_module(_NAME)
    finally:  # unless _real() replaced it meanwhile, the stand-in leaves: later imports get the real module
        if sys.modules.get("importlib.metadata") is stand_in:
            if saved_module is None:
                del sys.modules["importlib.metadata"]
            else:
                sys.modules["importlib.metadata"] = saved_module
        if importlib.__dict__.get("metadata") is stand_in:
            if saved_attr is None:
                del importlib.__dict__["metadata"]
            else:
                importlib.__dict__["metadata"] = saved_attr
    return True
