"""The Redis key layout of one pool.

Every key of a pool starts with the pool prefix ``trawl:{<namespace>/<pool>}``; the part in braces is
the Redis Cluster hash tag, so every key of a pool lives in one slot and every script touches one slot.

Pool-wide keys (``P`` is the prefix)::

    P:ring:<0-9>     list    jobs of that priority with ready tasks, not suspended, of the tenant "" (jobs
                             registered without a tenant): the round-robin ring
    P:ring:<0-9>:<t> list    the same ring of tenant <t>
    P:tq:<0-9>       zset    tenant -> pass (its virtual time: claims taken / weight) for the tenants with a
                             non-empty ring at that priority; a claim serves the lowest passes first
    P:tcfg           hash    tenant -> "weight|in-flight|requests per second|pages per day|URLs queued|browser
                             seconds per day" (empty: no limit; trawl.queue.tenants.encode_limits),
                             "*" -> the default of unlisted tenants, "aging" -> seconds (the operator writes it)
    P:tn:<t>         hash    tenant <t>'s usage: clm (claimed, total), out (left flight: in flight = clm - out),
                             qin (entries into ready or delayed: queued = qin - clm), day/pd (UTC day and its
                             claims), tk/tt (rate tokens and their time), hold/hm/hs (the quota that held it
                             back at its latest claim, its figure, since when), qhold/qhm/qhs (the URLs-queued
                             quota that stopped its seeds at their latest enqueue), bday/bms (UTC day and the
                             browser page milliseconds of its jobs that day: add_browser_seconds)
    P:tset           set     every tenant that registered a job (tenant_usage lists them)
    P:lsv            hash    priority -> when that level last had a claim serve it, or began waiting (aging);
                             a priority is there exactly when its tenant queue is not empty
    P:tv             string  set by the first signals snapshot, which entered the rings of jobs queued before
                             tenants existed into their tenant queue (once per data set)
    P:dj             zset    job -> earliest due time of its delayed tasks (promotion index)
    P:wd             zset    worker -> lease deadline (a worker's leases all share its deadline)
    P:wi             hash    worker -> "in_flight|last_seen|draining" (heartbeat reports)
    P:cd             set     pods cordoned by the autoscaler: their workers claim nothing new (rewritten by
                             the operator every poll, with an expiry, so a dead operator cordons nobody)
    P:w:<worker>     hash    "<job>|<task>" -> "<claimed_at>|<task payload>": the worker's leased tasks
    P:wc:<worker>    hash    the worker's last claim (nonce, time stamp, deadline), so a claim retried after
                             a lost reply returns the same tasks instead of leaking leases
    P:st             hash    pool counters: enq (tasks enqueued), completed (acks), failed (failed attempts),
                             svc (service microseconds), dead (dead letters of jobs neither cancelled nor
                             in retention)
    P:ev             stream  bounded event stream (MAXLEN ~): job-level transitions for the operator
    P:xd             zset    url digest -> end of its dedupe window (dedupe across jobs of the pool)
    P:px             hash    "<group>|<proxy host:port>|<ok|fail|blk|last>" -> each proxy's use and latest outcome
                             (:mod:`trawl.queue.proxyusage`; the pool's status.proxies)
    P:rl:<kind>:<d>  any     per-domain politeness state (rate limit, concurrency) shared by the pool's workers
    P:epoch          string  a random token set once (never expires): the operator records it on every job's
                             status, so a Redis that comes back without its data (a different or no token)
                             is noticed and told (condition DataLost), not taken for an empty queue

Per-job keys (``J`` is ``P:j:<job_id>``)::

    J                hash    config (priority, retry policy, caps) and counters (tot, pen, inf, ret, suc, dead, ...;
                             bms: browser page milliseconds of its tasks, every attempt)
    J:spec           string  the job's resolved spec as JSON, for workers
    J:r              list    ready tasks, each a compact payload "<task>|<attempts>|<stalls>|<depth>|<url>"
    J:z              zset    delayed tasks (payload -> due time)
    J:dl             hash    dead letters: task -> JSON record with the attempt history
    J:dlt            zset    dead letters by time (task -> time), for "latest first"
    J:h              hash    failure history of tasks still being retried: task -> JSON list
    J:u              set     URLs already enqueued, as 12-byte digests (within-job dedupe: crawl jobs, and
                             jobs whose seeds may repeat)
    J:res            stream  results written by the worker's Redis sink (deleted on cancel, expired on retention)
    J:res:keys:d     hash    the (job, URL) records the sinks wrote, as 16-byte digests in 2-byte buckets
                             (:mod:`trawl.sinks.digests`): their dedupe (expired with the job's keys)
    J:res:keys       set     the same as hex keys, as workers before the digest hash wrote it: read, not written
    J:res:keys:s3pending  hash  S3 sink: record key -> object whose PUT is not known to have succeeded
    J:sk             hash    URLs skipped because robots.txt disallows them (:mod:`trawl.queue.notes`)
    J:cb             hash    domains whose circuit breaker held the job's tasks back (:mod:`trawl.queue.notes`)
    J:bk             hash    blocked responses per domain (:mod:`trawl.queue.notes`)
    J:ss, J:sc, J:ss:<d>, J:sc:<d>, J:ssd, J:pc   the job's sessions, their cookie jars, the domains with
                             sessions and proxy cool-downs (:mod:`trawl.worker.sessions`)

Job counters: ``pen`` = length of J:r, ``inf`` = the job's entries in workers' hashes, ``ret`` = size of
J:z (backoff retries and delayed releases), ``dead`` = size of J:dl plus ``dld`` (dead letters whose
records were dropped: the oldest beyond ``dlmax``, the records the job keeps), ``suc`` = acked; ``tot`` is
their sum. Seeds: ``cur`` is the seed cursor (positions of the seed stream taken), and on a sharded pool
the home's ``sm`` records the stream position with every shard's cursor there (ShardedQueue.enqueue_seeds).
``smu`` counts the page URLs sitemaps added (enqueue_sitemap.lua; a sitemap task has a negative depth).
Scripts change these and P:st only through lib.lua's counter helpers, one per move between states.
Job and worker ids must not contain ``|``, ``{`` or ``}``. A worker id names one process incarnation,
``<pod>@<random>`` (:func:`incarnation_id`): a process restarted in the same pod gets a new id, so it never
renews the leases of the process that died, and it drops that process's leases when it starts.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

PRIORITIES = range(10)
INCARNATION_SEP = "@"  # never in a pod name (DNS subdomain)


def incarnation_id(pod: str) -> str:
    """A worker id for one start of a process in ``pod``: the pod name plus a random incarnation."""
    return f"{pod}{INCARNATION_SEP}{secrets.token_hex(4)}"


def pod_of(worker_id: str) -> str:
    """The pod (or base name) of a worker id; ids without an incarnation are their own pod."""
    return worker_id.split(INCARNATION_SEP, 1)[0]


def pool_prefix(namespace: str, pool: str) -> str:
    """The prefix of a pool's keys, including the hash tag ``{namespace/pool}``."""
    for part in (namespace, pool):
        if not part or any(c in part for c in "{}|"):
            raise ValueError(f"invalid namespace or pool name: {part!r}")
    return f"trawl:{{{namespace}/{pool}}}"


def hash_tag(prefix: str) -> str:
    """The hash tag of a prefix (the text between the first ``{`` and the next ``}``)."""
    start = prefix.find("{")
    end = prefix.find("}", start + 1)
    if start < 0 or end <= start + 1:
        raise ValueError(f"prefix {prefix!r} has no hash tag: Redis Cluster would scatter its keys")
    return prefix[start + 1 : end]


def dedupe_key(results_key: str) -> str:
    """The set of (job, URL) keys already written for a job, next to its results stream (``J:res:keys``)."""
    return results_key + ":keys"


def digests_key(dedupe: str) -> str:
    """The hash of the digests of the records the sinks wrote for a job (``J:res:keys:d``), beside the set
    of hex keys older workers wrote (``dedupe``, read until it expires)."""
    return dedupe + ":d"


def pending_key(dedupe: str) -> str:
    """The S3 sink's hash of record keys written into an object whose PUT is not known to have succeeded
    (record key -> object name), next to the job's dedupe set (``J:res:keys:s3pending``)."""
    return dedupe + ":s3pending"


def skipped_key(job_key: str) -> str:
    """The skip hash of a job, next to its hash (``J:sk``; ``job_key`` is :meth:`Keys.job`)."""
    return job_key + ":sk"


def blocked_key(job_key: str) -> str:
    """The blocked-responses-per-domain hash of a job, next to its hash (``J:bk``)."""
    return job_key + ":bk"


def throttled_key(job_key: str) -> str:
    """The circuit-breaker note hash of a job, next to its hash (``J:cb``)."""
    return job_key + ":cb"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names of one pool. Scripts receive these names in KEYS (see each ``.lua`` header)."""

    prefix: str

    def __post_init__(self) -> None:
        hash_tag(self.prefix)

    # pool-wide
    def ring(self, priority: int) -> str:
        return f"{self.prefix}:ring:{priority}"

    def tenant_ring(self, priority: int, tenant: str) -> str:
        """A tenant's ring at one priority; the tenant "" keeps the ring jobs had before tenants."""
        return self.ring(priority) if not tenant else f"{self.prefix}:ring:{priority}:{tenant}"

    def tenant_queue(self, priority: int) -> str:
        return f"{self.prefix}:tq:{priority}"

    @property
    def tenant_config(self) -> str:
        return f"{self.prefix}:tcfg"

    def tenant(self, tenant: str) -> str:
        return f"{self.prefix}:tn:{tenant}"

    @property
    def tenants(self) -> str:
        return f"{self.prefix}:tset"

    @property
    def level_served(self) -> str:
        return f"{self.prefix}:lsv"

    @property
    def delayed_jobs(self) -> str:
        return f"{self.prefix}:dj"

    @property
    def worker_deadlines(self) -> str:
        return f"{self.prefix}:wd"

    @property
    def worker_info(self) -> str:
        return f"{self.prefix}:wi"

    @property
    def cordoned(self) -> str:
        return f"{self.prefix}:cd"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}:w:{worker_id}"

    def worker_claim(self, worker_id: str) -> str:
        return f"{self.prefix}:wc:{worker_id}"

    @property
    def stats(self) -> str:
        return f"{self.prefix}:st"

    @property
    def events(self) -> str:
        return f"{self.prefix}:ev"

    @property
    def proxy_usage(self) -> str:
        """Each proxy's requests by outcome, from the workers (:mod:`trawl.queue.proxyusage`)."""
        return f"{self.prefix}:px"

    @property
    def cross_dedupe(self) -> str:
        return f"{self.prefix}:xd"

    @property
    def epoch(self) -> str:
        return f"{self.prefix}:epoch"

    # per job
    def job(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}"

    def spec(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:spec"

    def ready(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:r"

    def delayed(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:z"

    def dead(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:dl"

    def dead_times(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:dlt"

    def history(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:h"

    def seen(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:u"

    def bloom(self, job_id: str) -> str:
        """A crawl's Bloom filter (trawl.queue.bloom): built by the scripts from the seen set's name, so not in
        job_keys; cancel and expire_job remove it with them."""
        return f"{self.seen(job_id)}:bf"

    def results(self, job_id: str) -> str:
        return f"{self.prefix}:j:{job_id}:res"

    def results_written(self, job_id: str) -> str:
        """The set of (job, URL) record keys older sinks wrote for a job (see :func:`dedupe_key`); the names
        of the job's other dedupe keys derive from it."""
        return dedupe_key(self.results(job_id))

    def results_digests(self, job_id: str) -> str:
        """The hash of the digests of the records the sinks wrote for a job (see :func:`digests_key`)."""
        return digests_key(self.results_written(job_id))

    def results_pending(self, job_id: str) -> str:
        """The S3 sink's record keys pending in an object not known to be stored (see :func:`pending_key`)."""
        return pending_key(self.results_written(job_id))

    def skipped(self, job_id: str) -> str:
        """The job's skipped URLs (robots.txt), a note workers leave for the operator (:mod:`trawl.queue.notes`)."""
        return skipped_key(self.job(job_id))

    def throttled(self, job_id: str) -> str:
        """The domains whose circuit breaker held the job's tasks back (:mod:`trawl.queue.notes`)."""
        return throttled_key(self.job(job_id))

    def page_state(self, lineage: str) -> str:
        """A refresh lineage's page state, URL digest -> state (:mod:`trawl.queue.pagestate`)."""
        return f"{self.prefix}:ps:{lineage}"

    def rate_limit(self, domain: str, kind: str = "rate") -> str:
        """Per-domain politeness state shared by a pool's workers (``kind``: e.g. ``rate``, ``conc``)."""
        return f"{self.prefix}:rl:{kind}:{domain}"

    def job_keys(self, job_id: str) -> list[str]:
        """Every key a job owns (cancel deletes them, retention expires them)."""
        return [
            self.job(job_id),
            self.spec(job_id),
            self.ready(job_id),
            self.delayed(job_id),
            self.dead(job_id),
            self.history(job_id),
            self.seen(job_id),
            self.results(job_id),
            self.dead_times(job_id),
        ]

    def pool_keys(self) -> list[str]:
        return [
            *(self.ring(p) for p in PRIORITIES),
            *(self.tenant_queue(p) for p in PRIORITIES),
            self.tenant_config,
            self.tenants,
            self.level_served,
            f"{self.prefix}:tv",
            self.delayed_jobs,
            self.worker_deadlines,
            self.worker_info,
            self.stats,
            self.events,
            self.cross_dedupe,
            self.epoch,
        ]
