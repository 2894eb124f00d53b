"""Names the API promises: its group and version, the labels, annotations and finalizer on Trawl's objects,
the worker Deployment's name and selector, and a pool's key prefix in Redis.

Shared by the operator, the CLI, the workers and the local supervisor; no model is imported here, so a
command that only needs a name does not load pydantic.
"""

from __future__ import annotations

GROUP = "trawl.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

LABEL_POOL = "trawl.dev/pool"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_CRON = "trawl.dev/cronscrapejob"
# The operator reads only the Secrets that carry this label (its Secret watch selects them on the API
# server): a pool's Redis settings, a sink's or an onComplete hook's credentials, the Secrets a pool
# mounts into its workers. Every other Secret of the namespaces it watches never reaches it.
LABEL_SECRET = "trawl.dev/secret"
SECRET_SELECTOR = f"{LABEL_SECRET}=true"
ANNOTATION_RETRY_DEAD = "trawl.dev/retry-dead-letters"
# A retry annotation value ending in this also requeues permanent failure classes (`trawl dlq retry --all`).
RETRY_ALL_SUFFIX = "/all"
ANNOTATION_SCHEDULED_AT = "trawl.dev/scheduled-at"
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
FINALIZER = "trawl.dev/finalizer"
FIELD_MANAGER = "trawl-operator"


def deployment_name(pool: str) -> str:
    return f"{pool}-workers"


def queue_prefix(namespace: str, pool: str, key_prefix: str | None = None) -> str:
    """All keys of a pool share this hash tag, so every queue script touches one Redis Cluster slot."""
    return f"{key_prefix or 'trawl'}:{{{namespace}/{pool}}}"


def pool_selector(pool: str) -> dict[str, str]:
    return {LABEL_NAME: "trawl", LABEL_COMPONENT: "worker", LABEL_POOL: pool}
