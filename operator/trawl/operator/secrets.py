"""The operator's index of Secrets (fed by a watch) and reads from it.

The watch selects, on the API server, the Secrets labelled ``trawl.dev/secret=true``
(:data:`trawl.api.naming.SECRET_SELECTOR`): the operator sees no other Secret, not even its existence,
so a Secret it cannot find is either missing or unlabelled, and every message that says so gives the
command that labels it. Credentials are kept only in memory and never logged or written to a status:
errors name the Secret and key only.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from trawl.api.common import SecretKeyRef
from trawl.api.naming import LABEL_SECRET, SECRET_SELECTOR
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.redisconn.settings import RedisConfigError


class SecretNotFound(RedisConfigError):
    """A Secret, or a key of it, is not in the index (the message names them, never a value).

    A :class:`RedisConfigError` because the pools' Redis settings are the Secrets read most: a pool whose
    password Secret is missing reports its Redis settings as unusable."""


# Secret types that never hold Redis settings and can be large (Helm keeps every release in one):
# indexed without their data, so their presence still counts (spec.worker.secrets may name them).
DATALESS_SECRET_TYPES = frozenset(
    {
        "helm.sh/release.v1",
        "kubernetes.io/service-account-token",
        "kubernetes.io/dockercfg",
        "kubernetes.io/dockerconfigjson",
        "bootstrap.kubernetes.io/token",
    }
)


def labelled(labels: Mapping[str, str] | None) -> bool:
    """Whether a Secret's owner lets Trawl read it (the label the operator's watch selects)."""
    return (labels or {}).get(LABEL_SECRET) == "true"


def label_fix(namespace: str, names: list[str]) -> str:
    """The command that lets the operator read these Secrets of ``namespace``."""
    return f"kubectl label secret {' '.join(names)} -n {namespace} {SECRET_SELECTOR}"


def not_visible(namespace: str, name: str) -> str:
    """What to say of a Secret the index does not hold: missing, or not labelled, and the fix for the latter."""
    return (
        f"Secret {namespace}/{name} not found among the Secrets labelled {SECRET_SELECTOR} (the operator "
        f"reads no other): if it exists, label it: {label_fix(namespace, [name])}"
    )


def secret_index_entry(
    secret_type: str | None,
    data: Mapping[str, Any] | None,
    resource_version: str | None = None,
    *,
    labels: Mapping[str, str] | None,
) -> dict[str, Any] | None:
    """What the operator keeps of a Secret in its index (fed by a watch): its base64 data, and a version.
    None for a Secret without the label: never kept (the watch does not deliver those; this holds even if
    one came).

    The index replaces a GET per reconcile (once a second per active job) and a TTL cache: a rotated
    Secret reaches the clients with the watch event, and the operator needs list/watch on Secrets
    but no get. Kept only in memory, never logged or written to a status. The version is a digest of
    the data, not the resourceVersion: a label or annotation edit (a GitOps tool's tracking label,
    say) changes the latter, and must not roll the workers that read the Secret (the types kept
    without data have only the resourceVersion)."""
    if not labelled(labels):
        return None
    if secret_type in DATALESS_SECRET_TYPES:
        return {"data": {}, "version": resource_version or ""}
    kept = {str(k): str(v) for k, v in (data or {}).items()}
    digest = hashlib.sha256()
    for key in sorted(kept):
        digest.update(f"{key}\0{kept[key]}\0".encode())
    return {"data": kept, "version": digest.hexdigest()[:16]}


def secret_data(secrets: Mapping[Any, Any], namespace: str, name: str) -> dict[str, str] | None:
    """The Secret's data from the index (a kopf index: key -> store of values), None if it does not exist."""
    for entry in secrets.get((namespace, name)) or ():
        data: dict[str, str] = entry["data"]
        return data
    return None


def redis_secret_names(spec: ScrapePoolSpec) -> list[str]:
    """The Secrets the pool's Redis settings come from."""
    redis = spec.redis
    refs = [
        redis.url_secret_ref,
        redis.password_secret_ref,
        redis.sentinel_password_secret_ref,
        redis.tls.ca_secret_ref if redis.tls else None,
    ]
    return sorted({ref.name for ref in refs if ref is not None})


def unseen_redis_secrets(secrets: Mapping[Any, Any], namespace: str, spec: ScrapePoolSpec) -> list[str]:
    """Which of the pool's Redis Secrets the index does not hold (missing, or not labelled)."""
    return [name for name in redis_secret_names(spec) if secret_data(secrets, namespace, name) is None]


def redis_secrets_version(secrets: Mapping[Any, Any], namespace: str, spec: ScrapePoolSpec) -> str | None:
    """A digest of the versions of the Secrets the pool's Redis settings come from (None: it uses none).

    Workers read those settings once, at start (secretKeyRef environment variables): the worker pod
    template carries this digest so that a rotated Secret rolls the workers onto the new settings."""
    names = redis_secret_names(spec)
    if not names:
        return None
    versions = []
    for name in names:
        entries = list(secrets.get((namespace, name)) or ())
        versions.append(f"{name}={entries[0].get('version', '') if entries else '-'}")
    return hashlib.sha256("\0".join(versions).encode()).hexdigest()[:16]


def secret_value(secrets: Mapping[Any, Any], namespace: str, ref: SecretKeyRef) -> str:
    """One key of a Secret, decoded; SecretNotFound (naming the Secret, never the value) if absent."""
    data = secret_data(secrets, namespace, ref.name)
    if data is None:
        raise SecretNotFound(not_visible(namespace, ref.name))
    if ref.key not in data:
        raise SecretNotFound(f"Secret {namespace}/{ref.name} has no key {ref.key!r}")
    return base64.b64decode(data[ref.key]).decode()


def unreadable(ref: SecretKeyRef) -> str:
    """What a job's status says about a Secret key it names that cannot be read: nothing about which
    Secrets or keys do exist (a job's author may not list the namespace's Secrets)."""
    return f"Secret key {ref.name}/{ref.key} is not readable"


def secret_reader(secrets: Mapping[Any, Any]) -> Callable[[str, SecretKeyRef], Awaitable[str]]:
    """An async reader of Secret keys from the index, for the sink checks and onComplete hooks."""

    async def read(namespace: str, ref: SecretKeyRef) -> str:
        return secret_value(secrets, namespace, ref)

    return read


no_secrets = secret_reader({})  # what code running without an index (tests, tools) sees: none exist
