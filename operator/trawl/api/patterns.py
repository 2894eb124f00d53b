"""The regular expressions a job author writes (crawl include/exclude, extract and render onlyMatching): RE2.

A job author is the least-trusted user of a shared Trawl, and these patterns are matched on a worker's
event loop, against URLs a crawled site chooses. Python's ``re`` backtracks: ``^(a+)+$`` against
``aaaa…!`` runs for minutes and stalls every job of the pool. RE2 (``google-re2``) matches in time linear
in the URL whatever the pattern, and refuses what needs backtracking (backreferences, lookaround) when
the pattern is compiled, so such a pattern is refused when the job is accepted (``Stalled/InvalidSpec``
naming the field), never on a worker.

``re2`` is imported on the first pattern compiled (a worker whose jobs set none never loads it). Matching
goes through RE2's own object rather than the ``re``-like wrapper: the wrapper builds offsets and a match
object per call (~3.7 µs on a URL against ~0.7 µs), and a crawl matches every discovered link.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

SYNTAX = "RE2 syntax (https://github.com/google/re2/wiki/Syntax: no backreferences or lookaround)"


class PatternError(ValueError):
    """A pattern RE2 cannot compile; the message says why."""


@functools.cache
def _re2() -> tuple[Any, Any, Any]:
    import re2
    from re2 import _re2 as raw

    options = re2.Options()
    options.log_errors = False  # a refused pattern is the user's error, reported on the job, not a log line
    options.never_capture = True  # only whether it matches is asked
    return raw.RE2, options, raw.RE2.Anchor.UNANCHORED


class Pattern:
    """One compiled RE2 pattern (or several as one alternation): :meth:`search` says whether it matches."""

    __slots__ = ("_anchor", "_re", "pattern")

    def __init__(self, pattern: str) -> None:
        compile_re2, options, anchor = _re2()
        compiled = compile_re2(pattern.encode("utf-8"), options)
        if not compiled.ok():
            raise PatternError(
                f"{pattern!r} is not a valid regular expression (RE2): {compiled.error().decode(errors='replace')}"
            )
        self.pattern = pattern
        self._re = compiled
        self._anchor = anchor

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in ``text`` (Python's ``re.search`` semantics)."""
        data = text.encode("utf-8", "surrogatepass")
        return bool(self._re.Match(self._anchor, data, 0, len(data))[0][0] != -1)

    def __repr__(self) -> str:
        return f"Pattern({self.pattern!r})"


def check(pattern: str) -> str:
    """``pattern`` if RE2 compiles it; :class:`PatternError` (a ValueError, so a field error) if not."""
    compiled(pattern)
    return pattern


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> Pattern:
    """The compiled pattern, cached (a job's patterns are compiled once per worker and model validation)."""
    return Pattern(pattern)


def any_of(patterns: Sequence[str]) -> Pattern | None:
    """One pattern that matches where any of ``patterns`` does (one RE2 pass per URL however many there
    are), or None for none. Each is checked on its own first, so an error names the pattern at fault."""
    for pattern in patterns:
        check(pattern)
    if not patterns:
        return None
    if len(patterns) == 1:
        return compiled(patterns[0])
    return Pattern("|".join(f"(?:{p})" for p in patterns))
