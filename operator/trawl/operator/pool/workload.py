"""The pool's workload in the cluster: its worker Deployment (apply, scale, delete) and its pods.

The operator is the only writer of the Deployment's replica count. The template is applied with
server-side apply under one field manager and replicas are set through the scale subresource
under another, so re-applying a changed template never resets the autoscaler's answer. Fields an
earlier manager co-owns are taken over first (fieldowners.take_over). Before a scale-down, each
pod's deletion cost says which to remove first; the Ready pods' start-up times feed the autoscaler.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trawl.api.common import format_time
from trawl.api.naming import FIELD_MANAGER, POD_DELETION_COST, deployment_name, pool_selector
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.autoscale.startup import pod_startup
from trawl.operator import kube
from trawl.operator.indexes import controller_uid
from trawl.operator.podfloor import broken_rules, operator_service_account, refusal
from trawl.queue.model import PoolSignals

from .deployment import worker_deployment
from .fieldowners import take_over

log = logging.getLogger(__name__)

TEMPLATE_HASH = "trawl.dev/template-hash"
# On the pod template: the versions of the Secrets the workers' Redis settings come from (a rotation rolls them).
REDIS_SECRETS_VERSION = "trawl.dev/redis-secrets-version"
SCALER_MANAGER = "trawl-autoscaler"


def template_hash(deployment: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(deployment, sort_keys=True).encode()).hexdigest()[:16]


async def _read_deployment(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj = await kube.call(kube.apps().read_namespaced_deployment, name, namespace)
    except Exception as exc:
        if kube.is_status(exc, 404):
            return None
        raise
    return kube.to_dict(obj)


class WorkloadRefused(Exception):
    """The worker Deployment cannot be applied: the pool is Stalled with ``reason`` and the message."""

    reason = "DeploymentRejected"


class DeploymentRejected(WorkloadRefused):
    """The API server refused the worker Deployment (4xx): the pool's spec produced an invalid object."""


class PodNotAllowed(WorkloadRefused):
    """The worker pod breaks the operator's pod floor (trawl.operator.podfloor): nothing is applied."""

    reason = "PodNotAllowed"


class DeploymentNotOwned(WorkloadRefused):
    """A Deployment of the workers' name exists that this pool does not control: it is left alone."""

    reason = "DeploymentNotOwned"


def not_owned_message(namespace: str, name: str, current: Mapping[str, Any]) -> str:
    owner = next((r for r in current["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    held = f"it is controlled by {owner.get('kind')} {owner.get('name')}" if owner else "it has no controller"
    return (
        f"Deployment {namespace}/{name} exists and this pool does not own it ({held}): the operator neither "
        f"changes nor deletes it; delete or rename it, or give the pool another name"
    )


async def _apply(namespace: str, name: str, body: dict[str, Any], manager: str) -> dict[str, Any]:
    try:
        applied = await kube.call(
            kube.apps().patch_namespaced_deployment,
            name,
            namespace,
            body,
            field_manager=manager,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    except Exception as exc:
        if kube.is_status(exc, 400, 404, 409, 415, 422):
            raise DeploymentRejected(kube.api_message(exc)) from None
        raise
    return kube.to_dict(applied)


async def _take_over_fields(namespace: str, name: str, current: Mapping[str, Any], now: datetime) -> bool:
    """Merge earlier managers' fields (e.g. a plain create) into ours, so the next apply owns them all."""
    managed = (current.get("metadata") or {}).get("managedFields") or []
    new = take_over(managed, FIELD_MANAGER, "apps/v1", format_time(now))
    if new is None:
        return False
    rv = (current.get("metadata") or {}).get("resourceVersion")
    # resourceVersion-guarded: a concurrent writer (the deployment controller) makes this fail, and
    # the next pass tries again from what it then reads.
    try:
        await kube.call(
            kube.apps().patch_namespaced_deployment,
            name,
            namespace,
            {"metadata": {"managedFields": new, "resourceVersion": rv}},
        )
    except Exception as exc:
        if kube.is_status(exc, 409):
            return False
        raise
    log.info("took over fields of Deployment %s/%s from %s", namespace, name, [m.get("manager") for m in managed])
    return True


async def ensure_deployment(
    namespace: str,
    pool: str,
    uid: str,
    spec: ScrapePoolSpec,
    initial_replicas: int,
    now: datetime,
    redis_secrets_version: str | None = None,
    keep_template: bool = False,
) -> dict[str, Any]:
    """Apply the worker Deployment when its rendered template changed (or fields must be taken over).

    One field manager applies everything the pool sets, so every such field can change or go away;
    under autoscaling, replicas belong to the autoscaler's manager alone (see module docstring).
    ``keep_template``: an existing Deployment is left as it is (its template cannot be known now)."""
    name = deployment_name(pool)
    fixed = None if spec.autoscaling.enabled else (spec.replicas if spec.replicas is not None else 1)
    wanted = worker_deployment(namespace=namespace, pool=pool, pool_uid=uid, spec=spec, replicas=fixed)
    broken = broken_rules(wanted["spec"]["template"]["spec"], operator_service_account())
    if broken:
        raise PodNotAllowed(refusal("the worker pod (spec.worker)", broken))
    current = await _read_deployment(namespace, name)
    if current is not None and controller_uid(current["metadata"]) != uid:
        raise DeploymentNotOwned(not_owned_message(namespace, name, current))
    if current is not None and keep_template:
        return current
    if redis_secrets_version is not None:
        wanted["spec"]["template"]["metadata"]["annotations"][REDIS_SECRETS_VERSION] = redis_secrets_version
    digest = template_hash(wanted)
    wanted["metadata"].setdefault("annotations", {})[TEMPLATE_HASH] = digest
    took_over = current is not None and await _take_over_fields(namespace, name, current, now)
    if (
        current is not None
        and not took_over
        and (current.get("metadata", {}).get("annotations") or {}).get(TEMPLATE_HASH) == digest
    ):
        return current
    if current is None and fixed is None:
        # Created with the autoscaler's starting point, which its manager then co-owns: the next
        # template apply (without replicas) leaves the count to the autoscaler alone.
        wanted["spec"]["replicas"] = initial_replicas
        applied = await _apply(namespace, name, wanted, FIELD_MANAGER)
        scale = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace}}
        await _apply(namespace, name, {**scale, "spec": {"replicas": initial_replicas}}, SCALER_MANAGER)
        log.info("created Deployment %s/%s", namespace, name)
        return applied
    applied = await _apply(namespace, name, wanted, FIELD_MANAGER)
    log.info("applied Deployment %s/%s (template %s)", namespace, name, digest)
    return applied


async def scale_deployment(namespace: str, pool: str, replicas: int) -> None:
    await kube.call(
        kube.apps().patch_namespaced_deployment_scale,
        deployment_name(pool),
        namespace,
        {"spec": {"replicas": replicas}},
        field_manager=SCALER_MANAGER,
    )


async def delete_deployment(namespace: str, pool: str, uid: str) -> bool:
    """Delete the pool's worker Deployment if the pool (``uid``) controls it; False if there is none it owns.

    The deletion is preconditioned on the uid read, so a Deployment replaced in between is not touched."""
    name = deployment_name(pool)
    current = await _read_deployment(namespace, name)
    if current is None:
        return False
    if controller_uid(current["metadata"]) != uid:
        log.info("pool %s/%s deleted; Deployment %s is not its own, left alone", namespace, pool, name)
        return False
    preconditions = {"preconditions": {"uid": current["metadata"]["uid"]}}
    try:
        await kube.call(kube.apps().delete_namespaced_deployment, name, namespace, body=preconditions)
    except Exception as exc:
        if kube.is_status(exc, 404, 409):  # gone, or another object now: not the one this pool owned
            return False
        raise
    return True


def deletion_costs(pod_names: list[str], signals: PoolSignals) -> dict[str, int]:
    """Pod deletion cost per pod: busy pods cost more, so a scale-down removes idle pods first."""
    costs = {}
    for pod in pod_names:
        activity = signals.workers.get(pod)
        in_flight = activity.in_flight if activity is not None else 0
        costs[pod] = 0 if in_flight == 0 else 1000 + min(in_flight, 100000)
    return costs


async def mark_idle_pods(namespace: str, pool: str, signals: PoolSignals) -> int:
    """Annotate worker pods with their deletion cost before a scale-down; returns pods patched."""
    selector = ",".join(f"{k}={v}" for k, v in pool_selector(pool).items())
    pods = await kube.call(kube.core().list_namespaced_pod, namespace, label_selector=selector)
    items = kube.to_dict(pods).get("items", [])
    names = [p["metadata"]["name"] for p in items]
    current = {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(POD_DELETION_COST) for p in items}
    patched = 0
    for pod, cost in deletion_costs(names, signals).items():
        if current.get(pod) != str(cost):
            await kube.call(
                kube.core().patch_namespaced_pod,
                pod,
                namespace,
                {"metadata": {"annotations": {POD_DELETION_COST: str(cost)}}},
            )
            patched += 1
    return patched


async def pod_startups(namespace: str, pool: str) -> list[tuple[str, float]]:
    """Creation → Ready seconds of the pool's Ready worker pods, for the autoscaler's start-up estimate."""
    selector = ",".join(f"{k}={v}" for k, v in pool_selector(pool).items())
    pods = await kube.call(kube.core().list_namespaced_pod, namespace, label_selector=selector)
    found = (pod_startup(p) for p in kube.to_dict(pods).get("items", []))
    return [f for f in found if f is not None]
