"""Only the library helpers a script uses: a Lua library prepended to a script, cut to what it calls.

Redis runs a script's whole text on every call, so each ``local function`` of a prepended library is a
closure built again on every EVALSHA, used or not. The queue's library (``trawl/queue/lua/lib.lua``) has 34
helpers; prepending all of them cost about 3 µs of Redis CPU per call against 1.4 µs for an empty script
(``INFO commandstats``), more than an ack's own work. A transition keeps the helpers it names, and the
helpers those name, in the library's order (a Lua local is visible only after its definition, so the order
the library was written in stays valid).

The library's shape this relies on (checked by the unit tests): comments, then top-level
``local function <name>(...)`` definitions, each closed by ``end`` at the start of a line.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

_DEF = re.compile(r"^local function ([A-Za-z_][A-Za-z0-9_]*)\(", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Comments and string literals name helpers without calling them ("-- see tenant_count"); long brackets are
# not used by the scripts (a test keeps it so).
_NOISE = re.compile(r"--[^\n]*|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"")


class Helper(NamedTuple):
    name: str
    text: str  # its leading comment and its definition, up to the next helper's comment


@functools.lru_cache(maxsize=8)
def split_library(lib: str) -> tuple[str, tuple[Helper, ...]]:
    """The library's head (before its first helper's comment) and its helpers, losslessly.

    Cached: every script of a queue is cut from the same library, and a worker builds its scripts before
    its first claim."""
    starts = [m.start() for m in _DEF.finditer(lib)]
    names = [m.group(1) for m in _DEF.finditer(lib)]
    # Each helper owns the comment lines just above its definition.
    cuts = [_comment_start(lib, s) for s in starts]
    head = lib[: cuts[0]] if cuts else lib
    bounds = [*cuts[1:], len(lib)]
    return head, tuple(Helper(n, lib[c:e]) for n, c, e in zip(names, cuts, bounds, strict=True))


def _comment_start(lib: str, start: int) -> int:
    """Where the run of ``--`` lines just above the line at ``start`` begins (``start`` if there is none).

    Walks back line by line from ``start`` (a line's start), never splitting the text before it."""
    pos = start
    while pos > 0:
        line_start = lib.rfind("\n", 0, pos - 1) + 1  # the line ending at pos - 1 (its newline)
        if not lib.startswith("--", line_start):
            break
        pos = line_start
    return pos


def names_used(code: str) -> set[str]:
    """Every identifier the code names outside comments and string literals."""
    return set(_NAME.findall(_NOISE.sub(" ", code)))


@functools.lru_cache(maxsize=256)
def _names_in_helper(text: str) -> frozenset[str]:
    """:func:`names_used` of a library helper, computed once for all the scripts that use it."""
    return frozenset(names_used(text))


def shake(lib: str, script: str) -> str:
    """The library cut to the helpers ``script`` needs (directly or through other helpers), then the script."""
    head, helpers = split_library(lib)
    by_name = {h.name: h for h in helpers}
    needed: set[str] = set()
    todo = [n for n in names_used(script) if n in by_name]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        todo.extend(n for n in _names_in_helper(by_name[name].text) if n in by_name and n not in needed)
    kept = "".join(h.text for h in helpers if h.name in needed)
    return head + kept + "\n" + script
