"""Taking over a child object's fields from earlier field managers (pure, no I/O).

Server-side apply removes a field the applier stops setting only if no other manager also owns
it. A Deployment first written by a plain create (an ``Update`` entry in ``managedFields``) keeps
that creator as co-owner of every field forever: a changed ``metricsPort`` then leaves the old port
behind (422 "Duplicate value"), and a removed pod annotation stays. What ``kubectl`` does when it
upgrades client-side-applied objects (``csaupgrade``) is done here: the earlier managers' field sets
are merged into the applier's own entry, so the next apply owns, changes and removes them.

Only ``spec`` (the part the pool renders) is taken: ``spec.replicas`` stays with whoever owns it
(the autoscaler), metadata written by others stays theirs (the deployment controller's revision
annotation), and subresource entries (``status``, ``scale``) are left alone.
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


def _spec_without_replicas(fields: Mapping[str, Any]) -> tuple[FieldSet, FieldSet]:
    """(what to take: ``f:spec`` minus replicas, what stays: everything else). Either may be empty."""
    rest, replicas = _split(fields, REPLICAS_PATH)
    spec = rest.pop("f:spec", None)
    taken: FieldSet = {"f:spec": spec} if isinstance(spec, dict) and _has_leaves(spec) else {}
    return taken, _merge(rest, replicas)


def foreign_entries(managed: list[Mapping[str, Any]], applier: str) -> list[int]:
    """Indexes of entries holding ``spec`` fields (other than replicas) the applier should take over.

    Only ``spec``: metadata written by others stays theirs (the deployment controller's revision
    annotation, a user's label), and subresource entries (status, scale) are never touched."""
    out = []
    for i, entry in enumerate(managed):
        if entry.get("subresource"):
            continue
        if entry.get("manager") == applier and entry.get("operation") == "Apply":
            continue
        taken, _ = _spec_without_replicas(entry.get("fieldsV1") or {})
        if taken:
            out.append(i)
    return out


def _has_leaves(fields: Mapping[str, Any]) -> bool:
    return any(key != "." for key in fields)


def take_over(
    managed: list[Mapping[str, Any]], applier: str, api_version: str, now: str
) -> list[dict[str, Any]] | None:
    """The new ``managedFields`` with other managers' ``spec`` fields (except replicas) merged into the
    applier's Apply entry, or None when there is nothing to take over."""
    taken = foreign_entries(managed, applier)
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
        spec, rest = _spec_without_replicas(entry.get("fieldsV1") or {})
        _merge(union, spec)
        if _has_leaves(rest):
            out.append({**copy.deepcopy(dict(entry)), "fieldsV1": rest})
    ours["fieldsV1"] = union
    return [ours, *out]
