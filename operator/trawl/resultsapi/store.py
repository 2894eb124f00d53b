"""What the results API reads and changes, with the operator's credentials: the ScrapeJob, its pool's
Redis (the pool's settings and Secrets, as the operator resolves them), and the retry annotation."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kubernetes
from kubernetes.client import ApiClient, ApiException
from pydantic import ValidationError
from redis.exceptions import RedisClusterException, RedisError

from trawl.api.common import validation_message
from trawl.api.naming import ANNOTATION_RETRY_DEAD, GROUP, RETRY_ALL_SUFFIX, SECRET_SELECTOR, VERSION
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator.connections import RedisConnections, pool_queue
from trawl.operator.secrets import redis_secret_names, secret_index_entry
from trawl.queue import Queue, QueueUnavailable
from trawl.queue.model import DeadLetterRecord
from trawl.redisconn.replies import text
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable
from trawl.sinks.redisstream import decode_entry

REQUEST_TIMEOUT = (5, 15)
# A URL's history scans the job's stream (it has no index by URL): bounded, and the answer says how far.
HISTORY_SCAN = 200_000
HISTORY_PAGE = 2_000
HISTORY_DEAD_LETTERS = 10_000


class StoreError(Exception):
    """A request that cannot be served, with its HTTP status and a message safe to show the caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class JobTarget:
    """A job as the API serves it: its uid, its sink, and its pool's queue client."""

    namespace: str
    name: str
    uid: str
    sink: str
    phase: str
    queue: Queue


def dead_letter_json(r: DeadLetterRecord) -> dict[str, Any]:
    when = datetime.fromtimestamp(r.time, UTC).isoformat().replace("+00:00", "Z") if r.time else None
    return {
        "url": r.url,
        "attempts": r.attempts,
        "errorClass": r.error_class,
        "lastError": r.message,
        "time": when,
        "history": r.history,
    }


class Store:
    def __init__(self, api: ApiClient) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api)
        self._core = kubernetes.client.CoreV1Api(api)
        self._connections = RedisConnections()

    async def close(self) -> None:
        await self._connections.close()

    async def _kube(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as exc:
            if exc.status in (403, 404):  # 403: a namespace the operator does not watch is one it does not serve
                return None
            raise StoreError(503, f"the Kubernetes API server answered {exc.status}") from None
        except Exception as exc:  # urllib3 and socket errors
            raise StoreError(503, f"the Kubernetes API server is unreachable: {type(exc).__name__}") from None

    async def job(self, namespace: str, name: str) -> JobTarget:
        """The job and its pool's queue; 404 when the job does not exist (asked only once authorised)."""
        job = await self._kube(self._custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "scrapejobs", name)
        if job is None:
            raise StoreError(404, f"ScrapeJob {namespace}/{name} not found")
        spec, status = job.get("spec") or {}, job.get("status") or {}
        pool_ns, pool_name = spec.get("poolNamespace") or namespace, str(spec.get("pool") or "")
        pool = await self._kube(
            self._custom.get_namespaced_custom_object, GROUP, VERSION, pool_ns, "scrapepools", pool_name
        )
        if pool is None:
            raise StoreError(409, f"the ScrapePool of ScrapeJob {namespace}/{name} does not exist")
        try:
            pool_spec = ScrapePoolSpec.model_validate(pool.get("spec") or {})
        except ValidationError as exc:
            raise StoreError(409, f"the ScrapePool of ScrapeJob {name} is invalid: {validation_message(exc)}") from None
        secrets = await self._secrets(pool_ns, pool_spec)
        try:
            redis = await self._connections.for_pool(pool_ns, pool_name, pool_spec, secrets)
        except (RedisConfigError, RedisUnreachable) as exc:  # their messages name hosts, never a secret
            raise StoreError(503, str(exc)) from None
        except Exception as exc:  # SecretNotFound and the like: name the kind only
            raise StoreError(503, f"the Redis settings of the job's pool cannot be resolved: {exc}") from None
        sink = str((status.get("results") or {}).get("sink") or (spec.get("output") or {}).get("sink") or "RedisStream")
        return JobTarget(
            namespace, name, job["metadata"]["uid"], sink, str(status.get("phase") or ""),
            pool_queue(redis, pool_ns, pool_name, pool_spec),
        )  # fmt: skip

    async def _secrets(self, namespace: str, spec: ScrapePoolSpec) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The pool's Redis Secrets in the shape of the operator's Secret index: only the labelled ones,
        as the operator reads them (list with a label selector; the operator has no get on Secrets)."""
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for name in redis_secret_names(spec):
            listed = await self._kube(
                self._core.list_namespaced_secret,
                namespace,
                label_selector=SECRET_SELECTOR,
                field_selector=f"metadata.name={name}",
            )
            for item in listed.items if listed is not None else []:
                meta = item.metadata
                entry = secret_index_entry(item.type, item.data, meta.resource_version, labels=meta.labels)
                if entry is not None:
                    found[(namespace, name)] = [entry]
        return found

    async def results_page(self, job: JobTarget, start: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` records of the job's stream from ``start`` (an XRANGE start), with their IDs."""
        if job.sink != "RedisStream":
            raise StoreError(
                409, f"ScrapeJob {job.namespace}/{job.name} writes to its {job.sink} sink: read its results there"
            )
        try:
            page = await job.queue.redis.xrange(job.queue.keys.results(job.uid), min=start, count=limit)
        except (RedisError, RedisClusterException, OSError) as exc:
            raise StoreError(503, f"the pool's Redis failed: {type(exc).__name__}") from None
        return [(text(entry_id), decode_entry(fields)) for entry_id, fields in page]

    async def dead_letters(self, job: JobTarget, limit: int) -> list[dict[str, Any]]:
        try:
            return [dead_letter_json(r) for r in await job.queue.dead_letters(job.uid, limit=limit)]
        except (QueueUnavailable, RedisError, RedisClusterException, OSError) as exc:
            raise StoreError(503, f"the pool's Redis failed: {type(exc).__name__}") from None

    async def request_retry(self, job: JobTarget, include_permanent: bool) -> str:
        """Set the retry annotation, exactly as `trawl dlq retry` does; the operator requeues them."""
        value = str(time.time_ns()) + (RETRY_ALL_SUFFIX if include_permanent else "")
        patch = {"metadata": {"annotations": {ANNOTATION_RETRY_DEAD: value}}}
        done = await self._kube(
            self._custom.patch_namespaced_custom_object, GROUP, VERSION, job.namespace, "scrapejobs", job.name, patch
        )
        if done is None:
            raise StoreError(404, f"ScrapeJob {job.namespace}/{job.name} not found")
        return value

    async def url_history(self, job: JobTarget, url: str) -> dict[str, Any]:
        """The records of ``url`` (with their stream IDs) and its dead letters. The stream is scanned from the
        start up to HISTORY_SCAN entries; ``complete`` says whether the scan reached its end."""
        records: list[dict[str, Any]] = []
        scanned, start, complete = 0, "-", True
        if job.sink == "RedisStream":
            complete = False
            while scanned < HISTORY_SCAN:
                page = await self.results_page(job, start, HISTORY_PAGE)
                scanned += len(page)
                records += [{"id": entry_id, "record": r} for entry_id, r in page if r.get("url") == url]
                if len(page) < HISTORY_PAGE:
                    complete = True
                    break
                start = f"({page[-1][0]}"
        dead = [d for d in await self.dead_letters(job, HISTORY_DEAD_LETTERS) if d["url"] == url]
        return {"records": records, "deadLetters": dead, "scanned": scanned, "complete": complete, "sink": job.sink}
