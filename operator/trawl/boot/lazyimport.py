"""Deferred imports of third-party modules a worker imports but does not run.

redis-py imports PyJWT at import time (``redis.auth.token``, for identity-provider tokens), and PyJWT
imports ``cryptography``'s X.509 and key classes: about an eighth of a worker's start-up, for a feature
a worker uses only with a token credential provider. :func:`defer` puts an empty module object for
such a name in ``sys.modules``; its code runs on the first access to an attribute it does not have yet,
so code that does use it works unchanged.

Not :class:`importlib.util.LazyLoader`: its module loads on any attribute access, and an ``import``
statement itself reads ``__spec__`` (to see whether the module is still initialising), so the first
``import jwt`` would load it anyway.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any, cast


class _Deferred(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:  # only for attributes the module does not have yet
        spec = self.__spec__
        assert spec is not None and spec.loader is not None
        self.__class__ = cast(Any, types.ModuleType)  # from now on an ordinary module
        spec.loader.exec_module(self)
        return getattr(self, attr)


def defer(name: str) -> bool:
    """Register module ``name`` to run on first use; False when it is loaded already or not installed."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _Deferred
    sys.modules[name] = module
    return True
