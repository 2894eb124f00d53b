"""ScrapePool reconciliation: own the worker Deployment, scale it from the queue, report status.

The operator is the only writer of the Deployment's replica count. The template is applied with
server-side apply under one field manager and replicas are set through the scale subresource
under another, so re-applying a changed template never resets the autoscaler's answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from redis.exceptions import OutOfMemoryError, RedisError

from trawl.api.common import format_time, validation_message
from trawl.api.naming import FIELD_MANAGER, POD_DELETION_COST, deployment_name, pool_selector
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.autoscale.startup import pod_startup
from trawl.operator import kube
from trawl.operator.conditions import Cond, get_condition, merge_conditions
from trawl.operator.connections import RedisConnections, pool_queue
from trawl.operator.job.status import Transition
from trawl.operator.secrets import redis_secrets_version, secret_data
from trawl.queue import QueueUnavailable
from trawl.queue.model import PoolSignals
from trawl.redisconn.memory import (
    EVICTION_POLICY,
    OUT_OF_MEMORY,
    RedisMemory,
    eviction_warning,
    out_of_memory_message,
    read_memory,
    read_memory_or_none,
)
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from .deployment import worker_deployment
from .fieldowners import take_over
from .scaling import Autoscalers, ScaleAdvice

log = logging.getLogger(__name__)

TEMPLATE_HASH = "trawl.dev/template-hash"
# On the pod template: the versions of the Secrets the workers' Redis settings come from (a rotation rolls them).
REDIS_SECRETS_VERSION = "trawl.dev/redis-secrets-version"
SCALER_MANAGER = "trawl-autoscaler"
# The cordon set in Redis lives this many polls (at least CORDON_MIN_TTL_SECONDS) unless written again:
# workers cordoned by an operator that stopped resume claiming on their own.
CORDON_TTL_POLLS = 3
CORDON_MIN_TTL_SECONDS = 15.0
# The ReplicaSet controller ranks pods by the deletion costs in its own informer cache, not by what the
# API server holds: a scale-down written right after new costs could be decided on the old ones (the
# real-node test saw a busy pod deleted before an idle one). Costs just written get this long to reach it.
COST_PROPAGATION_SECONDS = 1.0


@dataclass
class PoolOutcome:
    status: dict[str, Any]
    events: list[Transition] = field(default_factory=list)
    redis_memory: RedisMemory | None = None  # what this pass read of its Redis (for the gauges), if it did


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


class DeploymentRejected(Exception):
    """The API server refused the worker Deployment (4xx): the pool's spec produced an invalid object."""


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
) -> dict[str, Any]:
    """Apply the worker Deployment when its rendered template changed (or fields must be taken over).

    One field manager applies everything the pool sets, so every such field can change or go away;
    under autoscaling, replicas belong to the autoscaler's manager alone (see module docstring)."""
    name = deployment_name(pool)
    current = await _read_deployment(namespace, name)
    fixed = None if spec.autoscaling.enabled else (spec.replicas if spec.replicas is not None else 1)
    wanted = worker_deployment(namespace=namespace, pool=pool, pool_uid=uid, spec=spec, replicas=fixed)
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


async def delete_deployment(namespace: str, pool: str) -> None:
    await kube.delete_if_present(kube.apps().delete_namespaced_deployment, deployment_name(pool), namespace)


def missing_secrets(namespace: str, names: list[str], secrets: Mapping[Any, Any]) -> list[str]:
    """Which of the Secrets the pool mounts into its workers do not exist (pods cannot start without them)."""
    return [name for name in dict.fromkeys(names) if secret_data(secrets, namespace, name) is None]


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


def _signals_status(signals: PoolSignals, advice: ScaleAdvice | None) -> dict[str, Any]:
    return {
        "ready": signals.ready,
        "delayed": signals.delayed,
        "inFlight": signals.in_flight,
        "dead": signals.dead,
        "throughputPerSecond": round(advice.throughput, 2) if advice else 0.0,
        "failureRate": round(min(max(advice.failure_rate, 0.0), 1.0), 3) if advice else 0.0,
        "meanTaskSeconds": round(advice.mean_task_seconds, 3) if advice else 0.0,
    }


async def reconcile_pool(
    *,
    name: str,
    namespace: str,
    uid: str,
    generation: int,
    spec_raw: Mapping[str, Any],
    status: Mapping[str, Any],
    connections: RedisConnections,
    autoscalers: Autoscalers,
    now: datetime,
    jobs: list[Mapping[str, Any]] | None = None,
    secrets: Mapping[Any, Any] | None = None,
) -> PoolOutcome:
    """One pass over a pool. ``secrets``: the operator's Secret index (None: no Secrets exist)."""
    secrets = secrets if secrets is not None else {}
    prev = dict(status)
    events: list[Transition] = []
    new: dict[str, Any] = {
        "observedGeneration": generation,
        "deployment": deployment_name(name),
        "selector": ",".join(f"{k}={v}" for k, v in pool_selector(name).items()),
    }
    try:
        spec = ScrapePoolSpec.model_validate(dict(spec_raw))
    except ValidationError as exc:
        msg = validation_message(exc)
        return _finish(new, prev, generation, now, events, problem=("InvalidSpec", msg))

    try:
        deployment = await ensure_deployment(
            namespace,
            name,
            uid,
            spec,
            initial_replicas=spec.autoscaling.min_replicas,
            now=now,
            redis_secrets_version=redis_secrets_version(secrets, namespace, spec),
        )
    except DeploymentRejected as exc:
        msg = f"the API server rejected the worker Deployment: {exc}"
        return _finish(new, prev, generation, now, events, problem=("DeploymentRejected", msg))
    current = int((deployment.get("spec") or {}).get("replicas") or 0)
    dep_status = deployment.get("status") or {}
    new["replicas"] = int(dep_status.get("replicas") or 0)
    new["readyReplicas"] = int(dep_status.get("readyReplicas") or 0)

    try:
        redis = await connections.for_pool(namespace, name, spec, secrets)
        queue = pool_queue(redis, namespace, name, spec)
        signals = await queue.pool_signals()
        epoch = await queue.epoch()
        memory = await read_memory(redis)
    except OutOfMemoryError:  # it answers but refuses writes: hold the workers (they keep what they fetched)
        new["desiredReplicas"] = current
        full = await read_memory_or_none(redis)
        refused = (OUT_OF_MEMORY, out_of_memory_message(full))
        return replace(_finish(new, prev, generation, now, events, problem=refused), redis_memory=full)
    except (RedisConfigError, RedisUnreachable, QueueUnavailable, RedisError, OSError) as exc:
        connections.failed(namespace, name)
        new["desiredReplicas"] = current
        return _finish(new, prev, generation, now, events, problem=("RedisUnavailable", str(exc)))

    new["queueEpoch"] = epoch
    lost = pool_data_lost(prev, epoch)
    if lost is not None:
        events.append(Transition("Warning", "DataLost", lost))
    advice: ScaleAdvice | None = None
    if spec.autoscaling.enabled:
        startups: list[tuple[str, float]] = []
        if autoscalers.wants_startups((namespace, name), new["readyReplicas"]):
            try:
                startups = await pod_startups(namespace, name)
            except Exception as exc:  # the estimate keeps its last value (or the default)
                log.warning("pool %s/%s: cannot list worker pods for start-up times: %s", namespace, name, exc)
        advice = autoscalers.advise(
            (namespace, name), spec, signals, current, now, jobs or [], startups, enqueue_counter=queue.enqueued_total
        )
        if advice.write_cordon:
            try:
                ttl = max(CORDON_MIN_TTL_SECONDS, CORDON_TTL_POLLS * spec.autoscaling.poll_seconds)
                await queue.set_cordoned(advice.cordoned, ttl)
            except Exception as exc:  # best effort: uncordoned workers only keep claiming, as before
                log.warning("pool %s/%s: could not write the cordoned workers: %s", namespace, name, exc)
        if advice.startup_seconds is not None:
            new["podStartupSeconds"] = round(advice.startup_seconds, 2)
        desired = advice.desired
        reason = advice.reason
    else:
        desired = spec.replicas if spec.replicas is not None else 1
        reason = "autoscaling disabled: spec.replicas"
    new["queue"] = _signals_status(signals, advice)
    new["desiredReplicas"] = desired
    new["scalingReason"] = reason
    if desired != current:
        if desired < current:
            try:
                if await mark_idle_pods(namespace, name, signals):
                    await asyncio.sleep(COST_PROPAGATION_SECONDS)
            except Exception as exc:  # best effort: the drain still protects in-flight work
                log.warning("pool %s/%s: could not set pod deletion costs: %s", namespace, name, exc)
        await scale_deployment(namespace, name, desired)
        new["lastScale"] = {"time": format_time(now), "fromReplicas": current, "toReplicas": desired, "reason": reason}
        events.append(Transition("Normal", "Scaled", f"workers {current} -> {desired}: {reason}"))
    elif "lastScale" in prev:
        new["lastScale"] = prev["lastScale"]
    problem = None
    if spec.worker.secrets and new["readyReplicas"] < desired:
        missing = missing_secrets(namespace, spec.worker.secrets, secrets)
        if missing:
            names = ", ".join(repr(m) for m in missing)
            problem = (
                "SecretNotFound",
                f"worker pods cannot start: Secret {names} listed in spec.worker.secrets does not exist "
                f"({new['readyReplicas']}/{desired} workers ready)",
            )
    idle = signals.ready + signals.delayed + signals.in_flight == 0
    outcome = _finish(
        new,
        prev,
        generation,
        now,
        events,
        problem=problem,
        advice=advice,
        spec=spec,
        data_lost=lost,
        idle=idle,
        redis_warning=eviction_warning(memory) if memory is not None else None,
    )
    return replace(outcome, redis_memory=memory)


def pool_data_lost(prev: Mapping[str, Any], epoch: str) -> str | None:
    """What to tell when the pool's Redis answers with another data epoch than the pool last saw."""
    seen = prev.get("queueEpoch")
    if seen is None or seen == epoch:
        return None
    return (
        "the pool's Redis lost its data (a restart without persistence, a failover to a replica that had not "
        "caught up, or a flush): its queue, counters and RedisStream results are gone; each affected ScrapeJob "
        "says what that means for it (condition DataLost)"
    )


def failed_pool(
    name: str, status: Mapping[str, Any], generation: int, now: datetime, reason: str, msg: str
) -> PoolOutcome:
    """The status of a pass that failed unexpectedly: Stalled with the error, last observations kept."""
    new: dict[str, Any] = {
        "observedGeneration": generation,
        "deployment": deployment_name(name),
        "selector": ",".join(f"{k}={v}" for k, v in pool_selector(name).items()),
    }
    return _finish(new, dict(status), generation, now, [], problem=(reason, msg))


def _finish(
    new: dict[str, Any],
    prev: dict[str, Any],
    generation: int,
    now: datetime,
    events: list[Transition],
    *,
    problem: tuple[str, str] | None = None,
    advice: ScaleAdvice | None = None,
    spec: ScrapePoolSpec | None = None,
    data_lost: str | None = None,
    idle: bool = False,
    redis_warning: str | None = None,
) -> PoolOutcome:
    conds: list[Cond] = []
    if data_lost is not None:  # sticky: merge_conditions keeps it on later passes
        conds.append(Cond("DataLost", True, "RedisDataLost", data_lost))
    if problem is not None:
        reason, msg = problem
        conds += [
            Cond("Ready", False, reason, msg),
            Cond("Stalled", True, reason, msg),
            Cond("Reconciling", False, reason, ""),
        ]
        prev_stalled = get_condition(prev.get("conditions"), "Stalled")
        if prev_stalled is None or prev_stalled.get("reason") != reason or prev_stalled.get("status") != "True":
            events.append(Transition("Warning", reason, msg))
        for key in (
            "queue",
            "lastScale",
            "scalingReason",
            "desiredReplicas",
            "replicas",
            "readyReplicas",
            "podStartupSeconds",
            "queueEpoch",
        ):
            if key not in new and key in prev:
                new[key] = prev[key]
    else:
        desired = int(new.get("desiredReplicas", 0))
        ready = int(new.get("readyReplicas", 0))
        rolling = ready < desired
        msg = f"{ready}/{desired} workers ready"
        conds += [
            Cond("Ready", True, "WorkersAvailable" if not rolling else "Scaling", msg),
            Cond("Stalled", False, "Reconciled", ""),
            Cond("Reconciling", rolling, "Scaling" if rolling else "Reconciled", msg if rolling else ""),
        ]
    # An evicting Redis can drop the pool's data without an error: Degraded until its policy changes.
    evicting = Cond("Degraded", True, EVICTION_POLICY, redis_warning) if redis_warning is not None else None
    if evicting is not None:
        prev_degraded = get_condition(prev.get("conditions"), "Degraded")
        if prev_degraded is None or prev_degraded.get("reason") != EVICTION_POLICY:
            events.append(Transition("Warning", EVICTION_POLICY, evicting.message))
    if advice is not None:
        # The failure guard remembers recent failures; with no work left there is nothing degraded
        # to report (a GitOps tool would otherwise show an idle pool Degraded until the next success).
        conds.append(
            evicting
            or (
                Cond("Degraded", True, "FailureGuard", advice.reason)
                if advice.failure_guard and not idle
                else Cond("Degraded", False, "Idle" if idle else "Healthy", "")
            )
        )
        conds.append(
            Cond("ScalingLimited", True, advice.limited_reason or "Limited", advice.reason)
            if advice.limited
            else Cond("ScalingLimited", False, "WithinLimits", "")
        )
    elif problem is None and spec is not None:
        conds.append(evicting or Cond("Degraded", False, "Healthy", ""))
        conds.append(Cond("ScalingLimited", False, "AutoscalingDisabled", ""))
    new["conditions"] = merge_conditions(prev.get("conditions"), conds, generation=generation, now=now)
    return PoolOutcome(new, events)
