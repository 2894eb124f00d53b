"""The worker Deployment a ScrapePool owns, rendered from its spec (pure, no I/O).

The pod is restricted-Pod-Security compliant (non-root, no privilege escalation, all capabilities
dropped, RuntimeDefault seccomp, read-only root filesystem), gets the Redis password only as a
Secret reference, and its grace period exceeds the worker's drain so scale-down loses no work.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any

from trawl.api.naming import API_VERSION, FIELD_MANAGER, LABEL_MANAGED_BY, deployment_name, pool_selector, queue_prefix
from trawl.api.scrapepool import DEFAULT_WORKER_IMAGE, RedisMode, ScrapePoolSpec, WorkerSpec
from trawl.jobspec.podfiles import SECRETS_DIR, SECRETS_DIR_ENV

GRACE_MARGIN_SECONDS = 10

# Fixed ids of the image's user; a pool's podSecurityContext replaces them (OpenShift assigns its own).
DEFAULT_POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "fsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class WorkerDefaults:
    """What a pool that names no image or pull secrets gets: the operator's settings (the chart passes its own
    image and imagePullSecrets as TRAWL_WORKER_IMAGE / TRAWL_WORKER_IMAGE_PULL_SECRETS)."""

    image: str = DEFAULT_WORKER_IMAGE
    image_pull_secrets: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls) -> WorkerDefaults:
        secrets = os.environ.get("TRAWL_WORKER_IMAGE_PULL_SECRETS", "")
        return cls(
            image=os.environ.get("TRAWL_WORKER_IMAGE") or DEFAULT_WORKER_IMAGE,
            image_pull_secrets=[s.strip() for s in secrets.split(",") if s.strip()],
        )


def redis_env(spec: ScrapePoolSpec) -> list[dict[str, Any]]:
    """Environment variables that tell a worker how to reach Redis, secrets by reference only."""
    redis = spec.redis
    env: list[dict[str, Any]] = []
    if redis.mode == RedisMode.SENTINEL:
        # no URL: the worker asks these Sentinels for the master (and again after a failover)
        env.append({"name": "TRAWL_REDIS_SENTINELS", "value": ",".join(redis.sentinels or [])})
        env.append({"name": "TRAWL_REDIS_SENTINEL_MASTER", "value": redis.master_name or ""})
        if redis.sentinel_password_secret_ref is not None:
            ref = redis.sentinel_password_secret_ref
            env.append(
                {
                    "name": "TRAWL_REDIS_SENTINEL_PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
                }
            )
    elif redis.url_secret_ref is not None:
        env.append(
            {
                "name": "TRAWL_REDIS_URL",
                "valueFrom": {"secretKeyRef": {"name": redis.url_secret_ref.name, "key": redis.url_secret_ref.key}},
            }
        )
    else:
        env.append({"name": "TRAWL_REDIS_URL", "value": redis.url or ""})
    if redis.password_secret_ref is not None:
        env.append(
            {
                "name": "TRAWL_REDIS_PASSWORD",
                "valueFrom": {
                    "secretKeyRef": {"name": redis.password_secret_ref.name, "key": redis.password_secret_ref.key}
                },
            }
        )
    if redis.mode == RedisMode.CLUSTER:
        env.append({"name": "TRAWL_REDIS_CLUSTER", "value": "true"})
    if redis.shards > 1:
        env.append({"name": "TRAWL_REDIS_SHARDS", "value": str(redis.shards)})
    tls = redis.tls
    if tls is not None and tls.enabled:
        env.append({"name": "TRAWL_REDIS_TLS", "value": "true"})
        if tls.insecure_skip_verify:
            env.append({"name": "TRAWL_REDIS_TLS_INSECURE", "value": "true"})
        if tls.ca_secret_ref is not None:
            env.append(
                {
                    "name": "TRAWL_REDIS_CA_PEM",
                    "valueFrom": {"secretKeyRef": {"name": tls.ca_secret_ref.name, "key": tls.ca_secret_ref.key}},
                }
            )
    return env


def worker_deployment(
    *,
    namespace: str,
    pool: str,
    pool_uid: str,
    spec: ScrapePoolSpec,
    replicas: int | None,
    defaults: WorkerDefaults | None = None,
) -> dict[str, Any]:
    """The Deployment object. ``replicas`` None leaves the field out so an apply never resets it."""
    worker = spec.worker
    selector = pool_selector(pool)
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(pool),
            "namespace": namespace,
            "labels": {**selector, LABEL_MANAGED_BY: FIELD_MANAGER},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ScrapePool",
                    "name": pool,
                    "uid": pool_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "selector": {"matchLabels": selector},
            # Surge-only rollouts: a template change never takes capacity away mid-job.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {
                    "labels": {**(worker.pod_labels or {}), **selector},
                    "annotations": {
                        **(worker.pod_annotations or {}),
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(worker.metrics_port),
                    },
                },
                "spec": _pod_spec(namespace, pool, spec, defaults or WorkerDefaults.from_env()),
            },
        },
    }
    if replicas is not None:
        deployment["spec"]["replicas"] = replicas
    return deployment


def _pod_spec(namespace: str, pool: str, spec: ScrapePoolSpec, defaults: WorkerDefaults) -> dict[str, Any]:
    worker = spec.worker
    volumes, mounts = _volumes(worker)
    pod_spec: dict[str, Any] = {
        "containers": [_container(_env(namespace, pool, spec), mounts, worker, defaults)],
        "terminationGracePeriodSeconds": worker.drain_seconds + GRACE_MARGIN_SECONDS,
        "automountServiceAccountToken": False,
        "securityContext": copy.deepcopy(worker.pod_security_context or DEFAULT_POD_SECURITY_CONTEXT),
        "volumes": volumes,
    }
    pull_secrets = worker.image_pull_secrets if worker.image_pull_secrets is not None else defaults.image_pull_secrets
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in dict.fromkeys(pull_secrets)]
    if worker.node_selector:
        pod_spec["nodeSelector"] = worker.node_selector
    if worker.tolerations:
        pod_spec["tolerations"] = [t.model_dump(exclude_none=True, by_alias=True) for t in worker.tolerations]
    if worker.service_account_name:
        pod_spec["serviceAccountName"] = worker.service_account_name
    return pod_spec


def _env(namespace: str, pool: str, spec: ScrapePoolSpec) -> list[dict[str, Any]]:
    """The worker's environment: Redis, queue and worker settings, then the pool's own variables last."""
    worker = spec.worker
    env = [
        *redis_env(spec),
        {"name": "TRAWL_QUEUE_PREFIX", "value": queue_prefix(namespace, pool, spec.redis.key_prefix)},
        {"name": "TRAWL_CONCURRENCY", "value": str(worker.concurrency)},
        {"name": "TRAWL_CLAIM_BATCH", "value": str(worker.claim_batch)},
        {"name": "TRAWL_DRAIN_SECONDS", "value": str(worker.drain_seconds)},
        {"name": "TRAWL_METRICS_PORT", "value": str(worker.metrics_port)},
        {"name": "TRAWL_LEASE_SECONDS", "value": str(spec.queue.lease_seconds)},
        {"name": "TRAWL_WORKER_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if worker.allowed_cidrs:
        env.append({"name": "TRAWL_ALLOWED_CIDRS", "value": ",".join(worker.allowed_cidrs)})
    if worker.allow_cleartext_postgres_password:
        env.append({"name": "TRAWL_POSTGRES_CLEARTEXT_PASSWORD", "value": "true"})
    if worker.secrets:
        env.append({"name": SECRETS_DIR_ENV, "value": SECRETS_DIR})
    if worker.browser is not None:
        env += worker.browser.env()
    if worker.circuit_breaker is not None:
        env += worker.circuit_breaker.env()
    env += [{"name": e.name, "value": e.value} for e in worker.env or []]
    return env


def _volumes(worker: WorkerSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, the container's mounts): its own /tmp, the Secrets it may read, the pool's own volumes."""
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    for i, secret in enumerate(dict.fromkeys(worker.secrets or [])):
        # Volume names are ours (secret-<n>), so any Secret name fits the 63-character limit.
        volumes.append({"name": f"secret-{i}", "secret": {"secretName": secret, "defaultMode": 0o440}})
        mounts.append({"name": f"secret-{i}", "mountPath": f"{SECRETS_DIR}/{secret}", "readOnly": True})
    # The pool's own volumes (e.g. a PersistentVolumeClaim a JsonLines sink writes to), in Kubernetes' shapes.
    volumes += [v.model_dump(mode="json", by_alias=True, exclude_none=True) for v in worker.volumes or []]
    mounts += [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in worker.volume_mounts or []]
    return volumes, mounts


def _container(
    env: list[dict[str, Any]], mounts: list[dict[str, Any]], worker: WorkerSpec, defaults: WorkerDefaults
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "worker",
        "image": worker.image or defaults.image,
        "args": ["worker"],
        "env": env,
        "ports": [{"name": "metrics", "containerPort": worker.metrics_port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 10},
        # /livez fails when the worker's event loop has not run for 30 s or its heartbeats stopped.
        "livenessProbe": {
            "httpGet": {"path": "/livez", "port": "metrics"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": mounts,
    }
    if worker.image_pull_policy:
        container["imagePullPolicy"] = worker.image_pull_policy
    if worker.resources is not None:
        container["resources"] = worker.resources.model_dump(exclude_none=True, by_alias=True)
    return container
