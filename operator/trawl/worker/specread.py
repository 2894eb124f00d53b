"""Reading a job's worker spec (``JobConfig.spec``) as plain data, checking each value it reads.

The operator builds the spec from validated models (:func:`trawl.jobspec.wire.build_worker_spec`); a worker
reads it back here without pydantic, whose import and validators cost a third of a worker's start-up
(issue 38). What is read is still checked, as the models would: a section's keys (an unknown one is refused,
as the models' ``extra="forbid"`` did), each value's type, enumerations and the bounds a worker relies on.
Whatever does not read raises :class:`BadSpec`, naming the value, and the job's task is dead-lettered with
it (:meth:`trawl.worker.pipeline.TaskRunner.run`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

E = TypeVar("E", bound=StrEnum)
T = TypeVar("T")


class BadSpec(ValueError):
    """A job's worker spec that this worker cannot read; the message names the value and why."""


class Section:
    """One mapping of the spec (``where``: its path, for messages), read key by key."""

    def __init__(self, raw: Any, where: str, keys: frozenset[str] | None = None) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise BadSpec(f"{where}: expected an object, got {type(raw).__name__}")
        if keys is not None:
            unknown = sorted(str(k) for k in raw if k not in keys)
            if unknown:
                raise BadSpec(f"{where}: unknown field {', '.join(unknown)}")
        self.raw = raw
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}"

    def _fail(self, key: str, expected: str, value: Any) -> BadSpec:
        return BadSpec(f"{self._path(key)}: expected {expected}, got {value!r}"[:512])

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def integer(self, key: str, default: int, low: int | None = None, high: int | None = None) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, "an integer", value)
        if low is not None and value < low:
            raise self._fail(key, f"an integer of at least {low}", value)
        if high is not None and value > high:
            raise self._fail(key, f"an integer of at most {high}", value)
        return value

    def optional_integer(self, key: str, low: int | None = None) -> int | None:
        if self.raw.get(key) is None:
            return None
        return self.integer(key, 0, low)

    def number(self, key: str, default: float, low: float | None = None) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
            raise self._fail(key, "a number", value)
        if low is not None and value < low:
            raise self._fail(key, f"a number of at least {low}", value)
        return float(value)

    def text(self, key: str, default: str | None = None) -> str:
        value = self.raw.get(key, default)
        if not isinstance(value, str) or not value:
            raise self._fail(key, "a non-empty string", value)
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.raw.get(key) is None else self.text(key)

    def matching(self, key: str, pattern: str, default: str | None = None) -> str:
        value = self.text(key, default)
        if not re.match(pattern, value):
            raise self._fail(key, f"a string matching {pattern}", value)
        return value

    def enum(self, key: str, kind: type[E], default: E) -> E:
        value = self.raw.get(key, default)
        try:
            return kind(value)
        except ValueError:
            raise self._fail(key, "one of " + ", ".join(m.value for m in kind), value) from None

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.raw.get(key, default)
        if value not in choices:
            raise self._fail(key, "one of " + ", ".join(choices), value)
        return str(value)

    def texts(self, key: str) -> list[str] | None:
        """A list of non-empty strings, or None when unset."""
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self._fail(key, "a list of non-empty strings", value)
        return value

    def headers(self, key: str) -> dict[str, str]:
        value = self.raw.get(key) or {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self._fail(key, "an object of string values", value)
        return dict(value)

    def section(self, key: str, keys: frozenset[str] | None = None) -> Section | None:
        """The mapping under ``key``, or None when unset."""
        value = self.raw.get(key)
        return None if value is None else Section(value, self._path(key), keys)

    def sections(self, key: str, keys: frozenset[str]) -> list[Section]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(key, "a list", value)
        return [Section(v, f"{self._path(key)}[{i}]", keys) for i, v in enumerate(value)]

    def model(self, key: str, load: Callable[[], Callable[[Any], T]]) -> T | None:
        """The value under ``key`` validated by the model ``load()`` returns (its ``model_validate``), or None
        when unset or empty: for the sections only some jobs have, whose models are imported with their first job."""
        value = self.raw.get(key)
        if not value:
            return None
        try:
            return load()(value)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise BadSpec(f"{self._path(key)}: {exc}"[:1024]) from exc
