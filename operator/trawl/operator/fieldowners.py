"""Taking over a child object's fields from earlier field managers (pure, no I/O).

Server-side apply removes a field the applier stops setting only if no other manager also owns
it. A Deployment first written by a plain create (an ``Update`` entry in ``managedFields``) keeps
that creator as co-owner of every field forever: a changed ``metricsPort`` then leaves the old port
behind (422 "Duplicate value"), and a removed pod annotation stays. What ``kubectl`` does when it
upgrades client-side-applied objects (``csaupgrade``) is done here: the earlier managers' field sets
are merged into the applier's own entry, so the next apply owns, changes and removes them.

Fields another manager legitimately keeps (the autoscaler's ``spec.replicas``) stay with it, and
entries for subresources (``status`` written by the controller manager, ``scale``) are left alone.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

FieldSet = dict[str, Any]

REPLICAS_PATH = ("f:spec", "f:replicas")


def _merge(into: FieldSet, other: Mapping[str, Any]) -> FieldSet:
    for key, value in other.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else copy.deepcopy(value)
    return into


def _split(fields: Mapping[str, Any], path: tuple[str, ...]) -> tuple[FieldSet, FieldSet]:
    """(fields without ``path``, only ``path``) — either may be empty."""
    rest: FieldSet = copy.deepcopy(dict(fields))
    node: Any = rest
    for key in path[:-1]:
        node = node.get(key)
        if not isinstance(node, dict):
            return rest, {}
    if path[-1] not in node:
        return rest, {}
    kept = node.pop(path[-1])
    only: FieldSet = {}
    cursor = only
    for key in path[:-1]:
        cursor = cursor.setdefault(key, {})
    cursor[path[-1]] = kept
    if len(path) == 2 and not _has_leaves(rest[path[0]]):
        del rest[path[0]]  # a parent left with only its "." marker owned nothing but the split field
    return rest, only


def foreign_entries(managed: list[Mapping[str, Any]], applier: str, keep: set[str]) -> list[int]:
    """Indexes of entries whose fields the applier should take over.

    Every non-subresource entry of another manager, and the applier's own ``Update`` entries
    (a plain create under its name); ``keep`` managers keep only ``spec.replicas``."""
    out = []
    for i, entry in enumerate(managed):
        if entry.get("subresource"):
            continue
        manager, operation = entry.get("manager"), entry.get("operation")
        if manager == applier and operation == "Apply":
            continue
        if manager in keep:
            rest, _ = _split(entry.get("fieldsV1") or {}, REPLICAS_PATH)
            if not _has_leaves(rest):
                continue
        out.append(i)
    return out


def _has_leaves(fields: Mapping[str, Any]) -> bool:
    return any(key != "." for key in fields)


def take_over(
    managed: list[Mapping[str, Any]], applier: str, keep: set[str], api_version: str, now: str
) -> list[dict[str, Any]] | None:
    """The new ``managedFields`` with foreign fields merged into the applier's Apply entry, or None
    when there is nothing to take over. Managers in ``keep`` retain ``spec.replicas`` only."""
    taken = foreign_entries(managed, applier, keep)
    if not taken:
        return None
    ours_index = next(
        (
            i
            for i, e in enumerate(managed)
            if e.get("manager") == applier and e.get("operation") == "Apply" and not e.get("subresource")
        ),
        None,
    )
    ours: dict[str, Any] = (
        copy.deepcopy(dict(managed[ours_index]))
        if ours_index is not None
        else {"manager": applier, "operation": "Apply", "apiVersion": api_version, "fieldsType": "FieldsV1"}
    )
    ours["time"] = now
    union: FieldSet = copy.deepcopy(dict(ours.get("fieldsV1") or {}))
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(managed):
        if i == ours_index:
            continue
        if i not in taken:
            out.append(copy.deepcopy(dict(entry)))
            continue
        # Replicas are never taken: an apply that later omits them would reset the autoscaler's count.
        rest, replicas = _split(entry.get("fieldsV1") or {}, REPLICAS_PATH)
        _merge(union, rest)
        if entry.get("manager") in keep and replicas:
            out.append({**copy.deepcopy(dict(entry)), "fieldsV1": replicas})
    ours["fieldsV1"] = union
    return [ours, *out]
