"""ScrapePool reconciliation: own the worker Deployment, scale it from the queue, report status.

One pass applies the Deployment (workload.py), reads the queue's signals and Redis's memory, asks the
autoscaler (scaling.py) how many workers the work needs, scales to that, and hands what it found to
status.py. The operator is the only writer of the Deployment's replica count.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from redis.exceptions import OutOfMemoryError, RedisError

from trawl.api.common import format_time, validation_message
from trawl.api.naming import SECRET_SELECTOR
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.jobspec.tenancy import over_browser_quota, tenant_policy
from trawl.operator.connections import RedisConnections, pool_queue
from trawl.operator.events import Transition
from trawl.operator.podfloor import broken_rules, job_template_pod, operator_service_account, refusal
from trawl.operator.problems import Problem
from trawl.operator.secrets import label_fix, redis_secrets_version, secret_data, unseen_redis_secrets
from trawl.queue import Queue, QueueUnavailable
from trawl.queue.model import PoolSignals
from trawl.queue.proxyusage import summary as proxy_summary
from trawl.redisconn.memory import (
    OUT_OF_MEMORY,
    eviction_warning,
    out_of_memory_message,
    read_memory,
    read_memory_or_none,
)
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from .scaling import Autoscalers, ScaleAdvice
from .status import PoolOutcome, finish_pass, pass_status, pool_data_lost, signals_status, tenants_status
from .workload import (
    DeploymentRejected,
    WorkloadRefused,
    ensure_deployment,
    mark_idle_pods,
    pod_startups,
    scale_deployment,
)

log = logging.getLogger(__name__)

# The cordon set in Redis lives this many polls (at least CORDON_MIN_TTL_SECONDS) unless written again:
# workers cordoned by an operator that stopped resume claiming on their own.
CORDON_TTL_POLLS = 3
CORDON_MIN_TTL_SECONDS = 15.0
# The ReplicaSet controller ranks pods by the deletion costs in its own informer cache, not by what the
# API server holds: a scale-down written right after new costs could be decided on the old ones (the
# real-node test saw a busy pod deleted before an idle one). Costs just written get this long to reach it.
COST_PROPAGATION_SECONDS = 1.0


def templates_problem(spec: ScrapePoolSpec, operator_sa: str) -> Problem | None:
    """PodNotAllowed when one of the pool's onCompleteJobs templates breaks the operator's pod floor."""
    for template in spec.on_complete_jobs or []:
        rules = broken_rules(job_template_pod(template.template), operator_sa)
        if rules:
            return Problem("PodNotAllowed", refusal(f"spec.onCompleteJobs[{template.name}]", rules))
    return None


def missing_secrets(namespace: str, names: list[str], secrets: Mapping[Any, Any]) -> list[str]:
    """Which of the Secrets the pool mounts into its workers the index does not hold: missing (pods cannot
    start without them) or not labelled (the operator cannot tell which)."""
    return [name for name in dict.fromkeys(names) if secret_data(secrets, namespace, name) is None]


@dataclass(frozen=True)
class _Pass:
    """One pass over a pool with a valid spec: what its steps read, and the status and Events they add to."""

    namespace: str
    name: str
    generation: int
    spec: ScrapePoolSpec
    prev: dict[str, Any]
    new: dict[str, Any]
    now: datetime
    secrets: Mapping[Any, Any]
    events: list[Transition] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def stalled(self, problem: Problem) -> PoolOutcome:
        return finish_pass(self.new, self.prev, self.generation, self.now, self.events, problem=problem)


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
    prev = dict(status)
    new = pass_status(name, generation)
    try:
        spec = ScrapePoolSpec.model_validate(dict(spec_raw))
    except ValidationError as exc:
        return finish_pass(new, prev, generation, now, [], problem=Problem("InvalidSpec", validation_message(exc)))
    pool = _Pass(namespace, name, generation, spec, prev, new, now, secrets if secrets is not None else {})
    refused = templates_problem(spec, operator_service_account())
    if refused is not None:
        return pool.stalled(refused)
    try:
        current = await _apply_deployment(pool, uid)
    except DeploymentRejected as exc:
        return pool.stalled(Problem(exc.reason, f"the API server rejected the worker Deployment: {exc}"))
    except WorkloadRefused as exc:
        return pool.stalled(Problem(exc.reason, str(exc)))

    try:
        redis = await connections.for_pool(namespace, name, spec, pool.secrets)
        queue = pool_queue(redis, namespace, name, spec)
        signals = await queue.pool_signals()
        epoch = await queue.epoch()
        memory = await read_memory(redis)
        await _tenants(pool, queue)
        await _proxies(pool, queue)
    except OutOfMemoryError:  # it answers but refuses writes: hold the workers (they keep what they fetched)
        new["desiredReplicas"] = current
        full = await read_memory_or_none(redis)
        return replace(pool.stalled(Problem(OUT_OF_MEMORY, out_of_memory_message(full))), redis_memory=full)
    except (RedisConfigError, RedisUnreachable, QueueUnavailable, RedisError, OSError) as exc:
        connections.failed(namespace, name)
        new["desiredReplicas"] = current
        return pool.stalled(Problem("RedisUnavailable", str(exc)))

    new["queueEpoch"] = epoch
    lost = pool_data_lost(prev, epoch)
    if lost is not None:
        pool.events.append(Transition("Warning", "DataLost", lost))
    advice = await _scale(pool, queue, signals, current, autoscalers, jobs or [])
    outcome = finish_pass(
        new,
        prev,
        generation,
        now,
        pool.events,
        problem=_secrets_problem(namespace, spec, pool.secrets, new["readyReplicas"], new["desiredReplicas"]),
        advice=advice,
        spec=spec,
        data_lost=lost,
        idle=signals.ready + signals.delayed + signals.in_flight == 0,
        redis_warning=eviction_warning(memory) if memory is not None else None,
    )
    return replace(outcome, redis_memory=memory)


async def _proxies(pool: _Pass, queue: Queue) -> None:
    """Each proxy's use and health, as the workers counted them (trawl.queue.proxyusage), on the status of a
    pool with proxy groups: host:port only, never credentials."""
    if pool.spec.proxies is None or not pool.spec.proxies.groups:
        if "proxies" in pool.prev:
            pool.new["proxies"] = None  # the groups were removed: the list goes (pruned by the API server)
        return
    raw = await queue.redis.hgetall(queue.keys.proxy_usage)  # type: ignore[misc]
    pool.new["proxies"] = proxy_summary(raw) or None


async def _tenants(pool: _Pass, queue: Queue) -> None:
    """Write the pool's tenant table to the queue (every poll: a Redis that lost its data gets it back within
    one) and put each tenant's use on the status. A pool without tenancy writes an empty table once, when its
    status still lists tenants (its tenancy was removed: the quotas it set are lifted), and nothing after."""
    if pool.spec.tenancy is None and "tenants" not in pool.prev:
        return
    await queue.set_tenant_policy(tenant_policy(pool.spec.tenancy))
    # The status is merged into the stored one: None (pruned by the API server) removes the list.
    if pool.spec.tenancy is None:
        pool.new["tenants"] = None
        return
    usage = await queue.tenant_usage()
    held = over_browser_quota(pool.spec.tenancy, {u.tenant: u.browser_seconds_today for u in usage})
    pool.new["tenants"] = tenants_status(usage, held)


async def _apply_deployment(pool: _Pass, uid: str) -> int:
    """Apply the worker Deployment; the replicas it has (and, on the status, those that exist and are ready)."""
    deployment = await ensure_deployment(
        pool.namespace,
        pool.name,
        uid,
        pool.spec,
        initial_replicas=pool.spec.autoscaling.min_replicas,
        now=pool.now,
        redis_secrets_version=redis_secrets_version(pool.secrets, pool.namespace, pool.spec),
        # A Redis Secret out of sight (missing, or its label gone) says nothing about its data: the running
        # workers keep their template rather than roll onto settings the operator cannot see (the pool is
        # Stalled meanwhile, saying which Secret and how to label it).
        keep_template=bool(unseen_redis_secrets(pool.secrets, pool.namespace, pool.spec)),
    )
    dep_status = deployment.get("status") or {}
    pool.new["replicas"] = int(dep_status.get("replicas") or 0)
    pool.new["readyReplicas"] = int(dep_status.get("readyReplicas") or 0)
    return int((deployment.get("spec") or {}).get("replicas") or 0)


async def _scale(
    pool: _Pass,
    queue: Queue,
    signals: PoolSignals,
    current: int,
    autoscalers: Autoscalers,
    jobs: list[Mapping[str, Any]],
) -> ScaleAdvice | None:
    """Decide the workers the pool needs (the autoscaler, or spec.replicas), scale to that, say so on the
    status (and in a Scaled Event when it changed). The autoscaler's advice, None when it did not run."""
    spec, new = pool.spec, pool.new
    advice = await _advise(pool, queue, signals, current, autoscalers, jobs) if spec.autoscaling.enabled else None
    if advice is not None:
        if advice.startup_seconds is not None:
            new["podStartupSeconds"] = round(advice.startup_seconds, 2)
        desired, reason = advice.desired, advice.reason
    else:
        desired, reason = (spec.replicas if spec.replicas is not None else 1), "autoscaling disabled: spec.replicas"
    new["queue"] = signals_status(signals, advice)
    new["desiredReplicas"] = desired
    new["scalingReason"] = reason
    if desired != current:
        await _rescale(pool.key, signals, current, desired)
        when = format_time(pool.now)
        new["lastScale"] = {"time": when, "fromReplicas": current, "toReplicas": desired, "reason": reason}
        pool.events.append(Transition("Normal", "Scaled", f"workers {current} -> {desired}: {reason}"))
    elif "lastScale" in pool.prev:
        new["lastScale"] = pool.prev["lastScale"]
    return advice


async def _advise(
    pool: _Pass,
    queue: Queue,
    signals: PoolSignals,
    current: int,
    autoscalers: Autoscalers,
    jobs: list[Mapping[str, Any]],
) -> ScaleAdvice:
    """The autoscaler's answer, its cordon set written to the queue."""
    key, spec = pool.key, pool.spec
    startups: list[tuple[str, float]] = []
    if autoscalers.wants_startups(key, pool.new["readyReplicas"]):
        try:
            startups = await pod_startups(*key)
        except Exception as exc:  # the estimate keeps its last value (or the default)
            log.warning("pool %s/%s: cannot list worker pods for start-up times: %s", *key, exc)
    advice = autoscalers.advise(
        key, spec, signals, current, pool.now, jobs, startups, enqueue_counter=queue.enqueued_total
    )
    if advice.write_cordon:
        try:
            ttl = max(CORDON_MIN_TTL_SECONDS, CORDON_TTL_POLLS * spec.autoscaling.poll_seconds)
            await queue.set_cordoned(advice.cordoned, ttl)
        except Exception as exc:  # best effort: uncordoned workers only keep claiming, as before
            log.warning("pool %s/%s: could not write the cordoned workers: %s", *key, exc)
    return advice


async def _rescale(key: tuple[str, str], signals: PoolSignals, current: int, desired: int) -> None:
    """Set the Deployment's replicas; before a scale-down, mark which pods are idle so they go first."""
    if desired < current:
        try:
            if await mark_idle_pods(*key, signals):
                await asyncio.sleep(COST_PROPAGATION_SECONDS)
        except Exception as exc:  # best effort: the drain still protects in-flight work
            log.warning("pool %s/%s: could not set pod deletion costs: %s", *key, exc)
    await scale_deployment(*key, desired)


def _secrets_problem(
    namespace: str, spec: ScrapePoolSpec, secrets: Mapping[Any, Any], ready: int, desired: int
) -> Problem | None:
    """SecretNotFound while workers are missing and a Secret they mount does not exist (pods cannot start)."""
    if not spec.worker.secrets or ready >= desired:
        return None
    missing = missing_secrets(namespace, spec.worker.secrets, secrets)
    if not missing:
        return None
    names = ", ".join(repr(m) for m in missing)
    return Problem(
        "SecretNotFound",
        f"worker pods cannot start: Secret {names} listed in spec.worker.secrets not found among the Secrets "
        f"labelled {SECRET_SELECTOR} (the operator reads no other; {ready}/{desired} workers ready): "
        f"if it exists, label it: {label_fix(namespace, missing)}",
    )
