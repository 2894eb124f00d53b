"""``trawl secret ensure``: a Secret with random values, made inside the cluster once and then kept.

The chart's bundled Redis needs a password. Rendered by Helm, it was a new random one at every `helm
template` (what Argo CD runs): a password in every rendered manifest, and rotated away from the running
Redis on each sync unless a lookup could read the old one back. The chart's pre-install/pre-upgrade hook
runs this command instead (``charts/trawl/templates/redis-secret-hook.yaml``): the value is made where it
is used and never leaves the cluster, and every render of the chart is the same.

What it does is decided by :func:`plan`, from the Secret as it is: absent, it is created with a random
value for each ``--random`` key and each ``--derived`` key filled in from those (the Redis URL carries
the password); present, every value it holds is kept, and only what is missing is added (a key, a
label). Never a value in the output: the keys and labels it wrote, by name.
"""

from __future__ import annotations

import base64
import re
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from .cluster import Cluster
from .exits import CliError

ALPHABET = string.ascii_letters + string.digits  # what Helm's randAlphaNum drew from: safe in any URL
RANDOM_LENGTH = 32  # ~190 bits
PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.-]+)\}")
ATTEMPTS = 3  # another run (a retried hook pod) may write between our read and our write


def random_value(length: int = RANDOM_LENGTH) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def fill(template: str, values: Mapping[str, str]) -> str:
    """``{key}`` replaced by that key's value, percent-encoded (safe in a URL's user information)."""

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise CliError(
                f"the template {template!r} names {key!r}, which is neither a --random key nor in the Secret"
            )
        return quote(values[key], safe="")

    return PLACEHOLDER.sub(one, template)


@dataclass(frozen=True)
class Existing:
    """What matters of a Secret that exists: its decoded data and its labels."""

    data: dict[str, str]
    labels: dict[str, str]
    resource_version: str | None = None


@dataclass(frozen=True)
class Plan:
    """``create`` (``data`` and ``labels`` are all of it), ``update`` (what to add), or ``keep``."""

    action: str
    data: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def plan(
    existing: Existing | None,
    random_keys: list[str],
    derived: Mapping[str, str],
    labels: Mapping[str, str],
    make_random: Callable[[], str] = random_value,
) -> Plan:
    """What to write so that the Secret holds every key and label asked for, changing none it holds."""
    have = existing.data if existing is not None else {}
    added = {key: make_random() for key in random_keys if key not in have}
    values = {**have, **added}
    for key, template in derived.items():
        if key not in have:
            added[key] = fill(template, values)
    if existing is None:
        return Plan("create", added, dict(labels))
    new_labels = {k: v for k, v in labels.items() if existing.labels.get(k) != v}
    if not added and not new_labels:
        return Plan("keep")
    return Plan("update", added, new_labels)


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a mapping (the value may hold ``=``)."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{what} {item!r} is not KEY=VALUE")
        pairs[key] = value
    return pairs


def _encoded(data: Mapping[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


def _existing(secret: Any) -> Existing:
    data = {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.data or {}).items()}
    return Existing(data, dict(secret.metadata.labels or {}), secret.metadata.resource_version)


class SecretEnsurer:
    """Thin I/O around :func:`plan`: read the Secret, write what the plan says, say what was done."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def _read(self, name: str) -> Existing | None:
        secret, status = self.cluster.try_call(
            self.cluster.core.read_namespaced_secret, name, self.cluster.namespace, tolerate=(404,)
        )
        return None if status == 404 else _existing(secret)

    def ensure(self, name: str, random_keys: list[str], derived: Mapping[str, str], labels: Mapping[str, str]) -> str:
        ns = self.cluster.namespace
        for _ in range(ATTEMPTS):
            existing = self._read(name)
            todo = plan(existing, random_keys, derived, labels)
            if todo.action == "keep":
                return f"Secret {ns}/{name} kept: it holds every key and label asked for"
            if todo.action == "create":
                body = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": ns, "labels": todo.labels},
                    "type": "Opaque",
                    "data": _encoded(todo.data),
                }
                _, status = self.cluster.try_call(self.cluster.core.create_namespaced_secret, ns, body, tolerate=(409,))
                if status == 409:  # created meanwhile by another run: keep what it made
                    continue
                return f"Secret {ns}/{name} created with keys {', '.join(sorted(todo.data))}"
            assert existing is not None
            patch: dict[str, Any] = {"metadata": {"resourceVersion": existing.resource_version}}
            if todo.labels:
                patch["metadata"]["labels"] = todo.labels
            if todo.data:
                patch["data"] = _encoded(todo.data)
            _, status = self.cluster.try_call(
                self.cluster.core.patch_namespaced_secret, name, ns, patch, tolerate=(409,)
            )
            if status == 409:  # changed meanwhile: plan again from what it holds now
                continue
            added = [f"key {k}" for k in sorted(todo.data)] + [f"label {k}" for k in sorted(todo.labels)]
            return f"Secret {ns}/{name} kept, with {', '.join(added)} added"
        raise CliError(f"Secret {ns}/{name} kept changing while it was being ensured; run again")
