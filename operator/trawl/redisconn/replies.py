"""Reading Redis replies: a client made without ``decode_responses`` hands back bytes, one made with it
str, and a script's numbers come back as ints; every reader takes whichever it gets."""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str:
    """A reply element as str: bytes decoded as UTF-8, anything else through ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)
