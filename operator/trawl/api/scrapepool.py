"""ScrapePool: a Redis queue, the worker Deployment that consumes it, and how it scales."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from redis.connection import parse_url

from .common import Condition, DNSLabel, SecretKeyRef, SecretUse, TrawlModel, check_url_parses, format_number
from .formats import DEFAULT_FORMAT_BYTES, MAX_FORMAT_BYTES
from .policies import HARMLESS_HEADERS, PolitenessSpec, RequestSpec, RetrySpec
from .poolarchive import PoolArchiveSpec
from .proxies import ProxiesSpec, ProxyStatus
from .render import BrowserWorkerSpec
from .sessions import SessionSeed
from .tenancy import TenancySpec

DEFAULT_WORKER_IMAGE = "ghcr.io/trawl-dev/trawl:0.1.0"


class RedisTLS(TrawlModel):
    """TLS to Redis (rediss://)."""

    enabled: bool = Field(default=False, description="Connect with TLS.")
    ca_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding the PEM CA bundle that signs the server certificate."
    )
    insecure_skip_verify: bool = Field(
        default=False, description="Do not verify the server certificate. For testing only."
    )


class RedisMode(StrEnum):
    """What the pool's Redis is: one server, a Redis Cluster, or a master found through Redis Sentinel."""

    STANDALONE = "Standalone"
    CLUSTER = "Cluster"
    SENTINEL = "Sentinel"


# host:port of a Sentinel: a DNS name or IPv4 address, or an IPv6 address in brackets.
SENTINEL_ADDRESS_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):[0-9]{1,5}$"
SentinelAddress = Annotated[str, Field(max_length=261, pattern=SENTINEL_ADDRESS_PATTERN)]


class RedisSpec(TrawlModel):
    """How the operator and the workers reach the pool's Redis."""

    mode: RedisMode = Field(
        default=RedisMode.STANDALONE,
        description="Standalone: one server. Cluster: a Redis Cluster; url names any of its nodes (the others "
        "are discovered), and every key of the pool shares one hash tag, so the pool lives on one master. "
        "Sentinel: the master named masterName, as the Sentinels in sentinels report it (followed across "
        "failovers); no url then.",
    )

    url: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^rediss?://[^\s]+$",
        description="redis:// or rediss:// URL without a password (use passwordSecretRef).",
    )
    url_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding the whole Redis URL (which may include a password)."
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Hash tags the pool's tasks are spread over (by URL), so that this many Redis Cluster "
        "masters share one pool. A job's tasks and dedupe are spread over them by URL (a crawl's maxPages split "
        "into exact per-shard quotas). "
        "Results, politeness state and the data epoch stay on the first. Changing it applies to jobs "
        "created afterwards.",
    )
    password_secret_ref: SecretKeyRef | None = Field(default=None, description="Secret key holding the password.")
    sentinels: list[SentinelAddress] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="mode Sentinel: host:port of the Sentinels (asked in turn for the master's address).",
    )
    master_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=r"^[^\s]+$",
        description="mode Sentinel: the name the Sentinels monitor the master under (sentinel monitor <name> ...).",
    )
    sentinel_password_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="mode Sentinel: Secret key holding the Sentinels' own password (their requirepass), if they "
        "have one; passwordSecretRef is the master's.",
    )
    tls: RedisTLS | None = Field(
        default=None, description="TLS settings (with mode Sentinel: to the Sentinels and the master alike)."
    )
    key_prefix: str | None = Field(
        default=None,
        max_length=128,
        pattern=r"^[A-Za-z0-9:_.-]+$",
        description="Prefix of the pool's keys. Default: trawl:<namespace>/<pool>.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        sentinel_fields = [
            name
            for name, value in (
                ("sentinels", self.sentinels),
                ("masterName", self.master_name),
                ("sentinelPasswordSecretRef", self.sentinel_password_secret_ref),
            )
            if value is not None
        ]
        if self.mode == RedisMode.SENTINEL:
            if self.sentinels is None or self.master_name is None:
                raise ValueError("redis.mode Sentinel needs both sentinels and masterName")
            if self.url is not None or self.url_secret_ref is not None:
                raise ValueError("redis.mode Sentinel takes sentinels and masterName, not url or urlSecretRef")
            for address in self.sentinels:
                port = int(address.rpartition(":")[2])
                if not 1 <= port <= 65535:
                    raise ValueError(f"redis.sentinels: {address!r} has no valid port (1-65535)")
            return self
        if sentinel_fields:
            raise ValueError(f"redis.{', '.join(sentinel_fields)} apply to mode Sentinel only (mode is {self.mode})")
        if (self.url is None) == (self.url_secret_ref is None):
            raise ValueError("redis needs exactly one of url or urlSecretRef")
        if self.url is not None and "@" in self.url.split("//", 1)[-1].split("/", 1)[0]:
            raise ValueError("redis.url must not carry credentials; use passwordSecretRef or urlSecretRef")
        problem = redis_url_problem(self.url) if self.url is not None else None
        if problem is not None:
            raise ValueError(f"redis.url {self.url!r} is not a valid Redis URL: {problem}")
        return self


def redis_url_problem(url: str) -> str | None:
    """Why redis-py (in the operator and the workers alike) cannot use the URL, or None.

    The reason never repeats the URL, which may carry a password when it comes from a Secret."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return "the scheme must be redis:// or rediss://"
    try:
        check_url_parses(url)
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        return str(exc).replace(url, "<url>")
    if not url.startswith("unix://") and not _REDIS_DB_PATH.fullmatch(urlsplit(url).path):
        # redis-py ignores a path it cannot read as a number: the pool would use database 0 and say Ready.
        return "the path after host:port must be a database number, e.g. /0 (or nothing, for database 0)"
    return None


# A redis:// URL's path: nothing, "/", or "/<database number>" (REDIS_DB_RULE says it to the API server).
_REDIS_DB_PATH = re.compile(r"(/[0-9]*)?")
REDIS_DB_RULE = {
    "rule": "!has(self.url) || self.url.matches('^rediss?://[^/?#]*(/[0-9]*)?([?#].*)?$')",
    "message": "url: the path after host:port must be a database number, e.g. /0 (or nothing, for database 0)",
    "fieldPath": ".url",
}


# The API server's resource.Quantity syntax (as in the core types' OpenAPI): "500m", "1Gi", "2".
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = Annotated[str, Field(max_length=64, pattern=QUANTITY_PATTERN)]
# A label key as metav1 validates it: optional DNS-subdomain prefix, then a name of at most 63 characters.
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def check_label_keys(value: dict[str, str] | None, what: str) -> dict[str, str] | None:
    for key in value or {}:
        prefix, _, name = key.rpartition("/")
        if not _LABEL_KEY_RE.match(key) or len(name) > 63 or len(prefix) > 253:
            raise ValueError(f"{what} key {key!r} is not a valid label key (optional DNS prefix/, then a name)")
    return value


class Toleration(TrawlModel):
    """A core/v1 Toleration of the worker pods."""

    key: str | None = Field(default=None, max_length=317, description="Taint key; empty with Exists matches all.")
    operator: str | None = Field(default=None, pattern=r"^(Exists|Equal)$", description="Exists or Equal.")
    value: str | None = Field(default=None, max_length=63, description="Taint value for Equal.")
    effect: str | None = Field(
        default=None, pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)?$", description="Taint effect to match."
    )
    toleration_seconds: int | None = Field(default=None, description="For NoExecute: how long the pod stays bound.")


class Resources(TrawlModel):
    """Compute resources of each worker container."""

    requests: dict[str, Quantity] | None = Field(default=None, description="Minimum resources, e.g. cpu: 500m.")
    limits: dict[str, Quantity] | None = Field(default=None, description="Maximum resources, e.g. memory: 512Mi.")


class EnvVar(TrawlModel):
    """An environment variable with a literal value."""

    name: str = Field(min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Name.")
    value: str = Field(default="", max_length=32768, description="Value.")


# A Kubernetes object name (RFC 1123 subdomain).
DNSSubdomain = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
]


class PersistentVolumeClaimSource(TrawlModel):
    """core/v1 PersistentVolumeClaimVolumeSource."""

    claim_name: DNSSubdomain = Field(description="Name of a PersistentVolumeClaim in the pool's namespace.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")


class EmptyDirSource(TrawlModel):
    """core/v1 EmptyDirVolumeSource."""

    medium: str | None = Field(default=None, pattern=r"^(|Memory|HugePages)$", description='"" or Memory.')
    size_limit: str | None = Field(default=None, max_length=64, description="Most storage, e.g. 1Gi.")


class LocalObjectReference(TrawlModel):
    name: DNSSubdomain = Field(description="Name of the object in the pool's namespace.")


class CSISource(TrawlModel):
    """core/v1 CSIVolumeSource (an inline ephemeral CSI volume)."""

    driver: str = Field(min_length=1, max_length=253, description="CSI driver name.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")
    fs_type: str | None = Field(default=None, max_length=64, description="Filesystem type, e.g. ext4.")
    volume_attributes: dict[str, str] | None = Field(default=None, description="Driver-specific properties.")
    node_publish_secret_ref: LocalObjectReference | None = Field(
        default=None, description="Secret passed to the driver's NodePublishVolume."
    )


class Volume(TrawlModel):
    """A core/v1 Volume of the worker pods: one of persistentVolumeClaim, emptyDir or csi."""

    name: DNSLabel = Field(description="Volume name, referenced by volumeMounts.")
    persistent_volume_claim: PersistentVolumeClaimSource | None = Field(
        default=None, description="A PersistentVolumeClaim (shared by all workers needs ReadWriteMany)."
    )
    empty_dir: EmptyDirSource | None = Field(default=None, description="A directory that lives with the pod.")
    csi: CSISource | None = Field(default=None, description="An inline CSI volume.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        sources = [s for s in (self.persistent_volume_claim, self.empty_dir, self.csi) if s is not None]
        if len(sources) != 1:
            raise ValueError(f"volume {self.name!r} needs exactly one of persistentVolumeClaim, emptyDir or csi")
        return self


class VolumeMount(TrawlModel):
    """A core/v1 VolumeMount of the worker container."""

    name: DNSLabel = Field(description="Name of a volume in spec.worker.volumes.")
    mount_path: str = Field(min_length=2, max_length=1024, pattern=r"^/", description="Absolute path in the container.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")
    sub_path: str | None = Field(
        default=None, max_length=1024, pattern=r"^[^/]", description="Mount this path inside the volume instead."
    )


RESERVED_MOUNTS = ("/tmp", "/var/run/trawl")

# The workers' TRAWL_* variables carry the pool's settings (its Redis, its key prefix, its allowed
# networks): one set by the pool author would override them (a TRAWL_QUEUE_PREFIX naming another
# namespace's keys on a shared Redis), so the CRD and the model refuse them.
RESERVED_ENV_PREFIX = "TRAWL_"
ENV_RULE: dict[str, Any] = {
    "rule": f"self.all(e, !e.name.startsWith('{RESERVED_ENV_PREFIX}'))",
    "message": f"worker.env may not set {RESERVED_ENV_PREFIX}* variables: they are the operator's, set from the "
    "pool's spec",
}


class CircuitBreakerSpec(TrawlModel):
    """The per-domain circuit breaker the pool's workers share: after repeated timeouts, 5xx answers or
    connection errors from one domain, its tasks wait (without spending attempts) instead of hammering it."""

    failure_threshold: int = Field(
        default=5,
        ge=0,
        le=1000,
        description="Consecutive timeouts, 5xx answers or connection errors of a domain that open its breaker; "
        "0 turns the breaker off (failures then spend attempts and follow the job's retry policy).",
    )
    open_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="How long the breaker stays open the first time; each failed probe doubles it (up to 300 s).",
    )

    def env(self) -> list[dict[str, str]]:
        """The worker's environment for these settings (read by `trawl worker`)."""
        return [
            {"name": "TRAWL_BREAKER_FAILURES", "value": str(self.failure_threshold)},
            {"name": "TRAWL_BREAKER_OPEN_SECONDS", "value": f"{self.open_seconds:g}"},
        ]


class SecretKeyUse(TrawlModel):
    """A key of a Secret the pool mounts, and the one thing its jobs may use it for."""

    name: DNSLabel = Field(description="Name of the Secret; it must be listed in spec.worker.secrets.")
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="Key within the Secret.")
    use: SecretUse = Field(
        description="What a job may name it as: WebhookSigningKey (output.webhook.secretRef, "
        "onComplete.webhook.secretRef), PostgresPassword (output.postgres.passwordSecretRef), S3AccessKeyId "
        "(output.s3.accessKeyIdSecretRef) or S3SecretAccessKey (output.s3.secretAccessKeySecretRef)."
    )


class WorkerSpec(TrawlModel):
    """The worker pods of the pool."""

    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Worker image. Default: the operator's default worker image (the chart sets its own image), "
        f"else {DEFAULT_WORKER_IMAGE}.",
    )
    image_pull_secrets: list[DNSLabel] | None = Field(
        default=None,
        max_length=20,
        description="Secrets for pulling the worker image from a private registry (in the pool's namespace). "
        "Default: the operator's default pull secrets (the chart's imagePullSecrets).",
    )
    pod_security_context: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Replaces the pods' securityContext (core/v1 PodSecurityContext). Default: non-root with fixed "
        "ids 10001; on OpenShift give {runAsNonRoot: true} so the platform assigns the ids.",
    )
    image_pull_policy: str | None = Field(
        default=None, pattern=r"^(Always|IfNotPresent|Never)$", description="Always, IfNotPresent or Never."
    )
    concurrency: int = Field(
        default=32,
        ge=1,
        le=2048,
        description="Requests in progress per worker pod. A task waiting for its host's politeness token or "
        "slot parks and lets a claimed task start in its place.",
    )
    claim_batch: int | Literal["auto"] = Field(
        default="auto",
        description="Tasks a worker asks for in one claim: auto (sized from its free slots and observed task "
        "time, with a short buffer of claimed tasks that start within 0.1 s) or a number 1..1000 (more than "
        "the concurrency buffers the difference).",
    )
    resources: Resources | None = Field(default=None, description="Container resources.")
    env: list[EnvVar] | None = Field(
        default=None,
        max_length=100,
        json_schema_extra={"x-kubernetes-validations": [ENV_RULE]},
        description="Extra environment variables. Names starting with TRAWL_ are the operator's (set from the "
        "pool's spec) and are refused.",
    )
    secrets: list[DNSLabel] | None = Field(
        default=None,
        max_length=20,
        description="Secrets mounted read-only into the workers at /var/run/trawl/secrets/<name>/<key>; a job "
        "may name only the keys secretKeys declares, each for its use. Rotating a Secret reaches jobs started "
        "after the kubelet updates the files.",
    )
    secret_keys: list[SecretKeyUse] | None = Field(
        default=None,
        max_length=64,
        description="The keys of the mounted Secrets that the pool's jobs may name, each for one use: a job "
        "naming any other key, or a key for another use, is Stalled (SecretKeyNotAllowed). So a job cannot "
        "send the database password as an S3 access key ID, or a key meant for signing to a server of its "
        "choosing.",
    )
    allow_cleartext_postgres_password: bool = Field(
        default=False,
        description="Let PostgreSQL sinks answer a server that asks for the password in cleartext (libpq "
        "require_auth !password otherwise): such a server, wherever a job points its sink, would read the "
        "password. Only for a server that cannot use scram-sha-256 or md5, reached over TLS.",
    )
    drain_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description="Time a worker gets on SIGTERM to finish in-flight tasks; the pod's grace period adds 10 s.",
    )
    allowed_cidrs: list[str] | None = Field(
        default=None,
        max_length=64,
        description="Private, loopback or cluster networks that the pool's jobs may reach: the pages fetched and "
        "rendered, and the sinks and webhooks they name (PostgreSQL, S3, webhook, onComplete.webhook). Outside "
        "them only global addresses are allowed (against SSRF); an in-cluster sink needs its range here.",
    )
    node_selector: dict[str, str] | None = Field(default=None, description="Node selector of the pods.")
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=64, description="Tolerations of the pods (core/v1 Toleration objects)."
    )
    service_account_name: str | None = Field(
        default=None, max_length=253, description="Service account of the pods. Workers need no API access."
    )
    pod_annotations: dict[str, str] | None = Field(default=None, description="Extra annotations on the pods.")
    pod_labels: dict[str, str] | None = Field(default=None, description="Extra labels on the pods.")
    browser: BrowserWorkerSpec | None = Field(
        default=None,
        description="Headless Chromium settings for pools that run ScrapeJobs with render.mode Browser (the "
        "image must be the browser worker image).",
    )
    circuit_breaker: CircuitBreakerSpec | None = Field(
        default=None,
        description="Per-domain circuit breaker of the workers. Default: on, 5 failures, open 30 s.",
    )
    metrics_port: int = Field(default=9090, ge=1024, le=65535, description="Port of the Prometheus metrics endpoint.")
    volumes: list[Volume] | None = Field(
        default=None,
        max_length=20,
        description="Volumes of the worker pods (core/v1 shapes: persistentVolumeClaim, emptyDir, csi), e.g. where "
        "a JsonLines sink writes.",
    )
    volume_mounts: list[VolumeMount] | None = Field(
        default=None, max_length=20, description="Where the volumes are mounted in the worker container."
    )

    @field_validator("env")
    @classmethod
    def _env(cls, value: list[EnvVar] | None) -> list[EnvVar] | None:
        reserved = [e.name for e in value or [] if e.name.startswith(RESERVED_ENV_PREFIX)]
        if reserved:
            raise ValueError(f"worker.env may not set {', '.join(reserved)}: {ENV_RULE['message']}")
        return value

    @field_validator("claim_batch")
    @classmethod
    def _claim_batch(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= 1000:
            raise ValueError("claimBatch must be auto or a number 1..1000")
        return value

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        for cidr in value or []:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _declared_keys_are_mounted(self) -> Self:
        mounted = set(self.secrets or ())
        for entry in self.secret_keys or []:
            if entry.name not in mounted:
                raise ValueError(f"secretKeys names Secret {entry.name!r}, which worker.secrets does not list")
        return self

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_label_keys(value, "nodeSelector")

    @field_validator("pod_labels", "pod_annotations")
    @classmethod
    def _pod_meta(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_label_keys(value, "pod label or annotation")

    @model_validator(mode="after")
    def _mounts(self) -> Self:
        names = [v.name for v in self.volumes or []]
        if len(set(names)) != len(names):
            raise ValueError("worker.volumes names must be unique")
        for name in names:
            if name == "tmp" or name.startswith("secret-"):
                raise ValueError(f"volume name {name!r} is reserved (tmp, secret-<n>)")
        paths: set[str] = set()
        for mount in self.volume_mounts or []:
            if mount.name not in names:
                raise ValueError(f"volumeMount {mount.mount_path} names volume {mount.name!r}, not in worker.volumes")
            path = mount.mount_path.rstrip("/")
            if any(path == r or path.startswith(r + "/") or r.startswith(path + "/") for r in RESERVED_MOUNTS):
                raise ValueError(
                    f"volumeMount {mount.mount_path} overlaps a path the worker needs (/tmp, /var/run/trawl)"
                )
            if path in paths:
                raise ValueError(f"volumeMount {mount.mount_path} is listed twice")
            paths.add(path)
        return self

    def writable_mount_for(self, directory: str) -> VolumeMount | None:
        """The volumeMount a directory lies on (the deepest), if it is writable; else None."""
        best: VolumeMount | None = None
        for mount in self.volume_mounts or []:
            path = mount.mount_path.rstrip("/")
            on_it = directory.rstrip("/") == path or directory.startswith(path + "/")
            if on_it and (best is None or len(path) > len(best.mount_path.rstrip("/"))):
                best = mount
        if best is None or best.read_only:
            return None
        volume = next(v for v in self.volumes or [] if v.name == best.name)
        source = volume.persistent_volume_claim or volume.csi
        if source is not None and source.read_only:
            return None
        return best


class AutoscalingSpec(TrawlModel):
    """How the operator sizes the worker Deployment from the queue."""

    enabled: bool = Field(default=True, description="Scale from queue signals; when false, spec.replicas is used.")
    min_replicas: int = Field(default=0, ge=0, le=1000, description="Fewest workers; 0 allows scale to zero.")
    max_replicas: int = Field(default=10, ge=1, le=1000, description="Most workers.")
    target_drain_seconds: int = Field(
        default=30, ge=1, le=86400, description="Aim to drain the backlog within this many seconds."
    )
    failure_rate_threshold: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Above this share of failed tasks, do not scale up: the target is failing, more workers would "
        "only hit it harder.",
    )
    scale_down_delay_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="Scale-down window: replicas go down only to the highest answer of this many seconds, "
        "and not within this long of a scale-up (unless the backlog that asked for them has drained).",
    )
    idle_seconds_before_zero: int = Field(
        default=120, ge=0, le=86400, description="Idle time before scaling to zero (when minReplicas is 0)."
    )
    poll_seconds: float = Field(
        default=5,
        ge=1,
        le=60,
        description="How often the queue is read; arrivals are given workers enough to wait at most this long "
        "(p95) for a slot.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must not exceed maxReplicas")
        return self


ORIGIN_PATTERN = r"^https?://[^\s/?#@]+$"


class PoolRequestSpec(RequestSpec):
    """How each page of the pool's jobs is requested, where a job does not say; and where the pool's
    headers may go."""

    header_origins: list[Annotated[str, Field(min_length=8, max_length=300, pattern=ORIGIN_PATTERN)]] | None = Field(
        default=None,
        max_length=64,
        description="Origins (scheme://host[:port], no path) that receive the pool's default headers other "
        f"than {', '.join(sorted(HARMLESS_HEADERS))}: a credential (Authorization, Cookie, an API key) "
        "the pool holds for a site goes to that site only, and only when a job lists it among its URLs, "
        "never to a server a job author names. Required when the headers hold any other header; the "
        "harmless ones go to every job's own origins.",
    )

    @field_validator("header_origins")
    @classmethod
    def _origins_parse(cls, value: list[str] | None) -> list[str] | None:
        for origin in value or []:
            check_url_parses(origin)
        return value

    @model_validator(mode="after")
    def _credentials_have_origins(self) -> Self:
        private = sorted(k for k in self.headers or {} if k.lower() not in HARMLESS_HEADERS)
        if private and not self.header_origins:
            raise ValueError(
                f"headers {', '.join(private)} may carry a credential: list the origins they are for in "
                "defaults.request.headerOrigins (e.g. https://api.partner.example); a pool's default headers "
                "are no longer sent to every origin a job names"
            )
        return self


class PoolDefaults(TrawlModel):
    """Settings jobs of this pool inherit where they leave a field unset."""

    request: PoolRequestSpec | None = Field(default=None, description="Default request settings.")
    politeness: PolitenessSpec | None = Field(default=None, description="Default politeness settings.")
    retry: RetrySpec | None = Field(default=None, description="Default retry policy.")


# What a pool grants each job when its spec.jobLimits leaves a ceiling unset (see JobLimits).
DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
DEFAULT_REQUESTS_PER_SECOND = 100.0
DEFAULT_CONCURRENCY_PER_DOMAIN = 32
DEFAULT_URLS_PER_JOB = 100_000
DEFAULT_RESULTS_RETAINED = 100_000
DEFAULT_DEAD_LETTERS_RETAINED = 10_000
DEFAULT_MAX_PRIORITY = 5


class JobLimits(TrawlModel):
    """Ceilings every job of the pool stays within: a job may ask for less, never for more. A job that asks
    for more is Stalled with reason LimitExceeded (the field, its value and the ceiling) and nothing of it
    is enqueued; what a job leaves unset resolves within them. An unset ceiling is its default, or the
    pool's own default for the setting (spec.defaults) where that is higher."""

    max_response_bytes: int | None = Field(
        default=None,
        ge=1,
        le=1 << 30,
        description="Highest request.maxResponseBytes a job may ask for. A worker holds a body in memory for "
        "each of its concurrency slots, so slots times this must fit the worker's memory limit. "
        f"Default: {DEFAULT_MAX_RESPONSE_BYTES} (10 MiB, the built-in maxResponseBytes).",
    )
    requests_per_second: float | None = Field(
        default=None,
        gt=0,
        le=10000,
        description="Highest politeness.requestsPerSecond a job may ask for (per domain, across the pool's "
        f"workers: what the sites the pool fetches from receive). Default: {DEFAULT_REQUESTS_PER_SECOND:g}.",
    )
    max_concurrency_per_domain: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Highest politeness.maxConcurrencyPerDomain a job may ask for. "
        f"Default: {DEFAULT_CONCURRENCY_PER_DOMAIN} (one worker's default concurrency).",
    )
    max_urls_per_job: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,  # a crawl's maxPages may go this far (a job's seeds stop at 1,000,000)
        description="Most URLs one job may hold: its seeds (urls plus urlRanges) or, when it crawls, "
        "crawl.maxPages. Each is a task in the pool's Redis (the URL, up to 2048 characters, and a few bytes). "
        f"Default: {DEFAULT_URLS_PER_JOB}.",
    )
    max_results_retained: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Highest output.redisStream.maxLen a job may ask for: records the pool's Redis keeps per "
        "job (a job that sets none keeps 100000, or this when lower). "
        f"Default: {DEFAULT_RESULTS_RETAINED} (the built-in maxLen).",
    )
    max_dead_letters_retained: int | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description="Dead-letter records (URL, error, attempt history) the pool's Redis keeps per job: the "
        "latest; older ones are dropped and counted in the job's status.counts.deadLettersDropped (they still "
        "count as dead letters; `trawl dlq` no longer lists or retries them). "
        f"Default: {DEFAULT_DEAD_LETTERS_RETAINED}.",
    )
    max_priority: int | None = Field(
        default=None,
        ge=0,
        le=9,
        description="Highest priority a job may ask for. Priority is strict (the pool's workers claim higher "
        f"jobs first), so by default a job may only lower it. Default: {DEFAULT_MAX_PRIORITY} (the default "
        "priority).",
    )
    max_format_bytes: int | None = Field(
        default=None,
        ge=1024,
        le=MAX_FORMAT_BYTES,
        description="Most bytes each output format (extract.formats: markdown, text, structured, links) may put "
        "in one record; more is cut and the record names the format in its truncated list. Jobs do not set it. "
        f"Default: {DEFAULT_FORMAT_BYTES} (1 MiB).",
    )


@dataclass(frozen=True, slots=True)
class Ceilings:
    """A pool's job limits, every one resolved (ScrapePoolSpec.ceilings)."""

    max_response_bytes: int
    requests_per_second: float
    max_concurrency_per_domain: int
    max_urls_per_job: int
    max_results_retained: int
    max_dead_letters_retained: int
    max_priority: int
    max_format_bytes: int = DEFAULT_FORMAT_BYTES


class QueueSpec(TrawlModel):
    """Queue behaviour shared by the pool's jobs."""

    lease_seconds: float = Field(
        default=30,
        ge=2,
        le=3600,
        description="A claimed task returns to the queue if not heartbeated this long.",
    )
    max_stalls: int = Field(default=3, ge=1, le=100, description="Lease expiries after which a task is dead-lettered.")
    finished_job_retention_seconds: int = Field(
        default=7 * 86400,
        ge=60,
        description="How long a finished job's queue data is kept when the job sets no ttlSecondsAfterFinished.",
    )


MAX_ON_COMPLETE_JOBS = 20


class OnCompleteJobTemplate(TrawlModel):
    """A Job a ScrapeJob of this pool may run once it has finished: the job names it
    (spec.onComplete.job.template) and passes parameters, nothing else."""

    name: DNSLabel = Field(description="The name a ScrapeJob's onComplete.job.template gives.")
    template: dict[str, Any] = Field(
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="A batch/v1 JobTemplateSpec (metadata, spec). The Job <scrapejob>-on-complete is created "
        "from it in the pool's namespace, owned by the ScrapeJob, with TRAWL_JOB_NAME, TRAWL_JOB_UID, "
        "TRAWL_JOB_PHASE, TRAWL_RESULTS_*, TRAWL_COUNT_* and the job's parameters as TRAWL_PARAM_<NAME> in every "
        "container's env. Its pod may not use the operator's ServiceAccount, privileged containers, "
        "allowPrivilegeEscalation, added capabilities, host namespaces, hostPath volumes or host ports "
        "(the pool is Stalled, reason PodNotAllowed).",
    )

    @model_validator(mode="after")
    def _has_containers(self) -> Self:
        pod: Any = self.template
        for key in ("spec", "template", "spec"):
            pod = pod.get(key) if isinstance(pod, dict) else None
        if not isinstance(pod, dict) or not pod.get("containers"):
            raise ValueError(f"onCompleteJobs[{self.name}].template needs spec.template.spec.containers")
        return self


class ScrapePoolSpec(TrawlModel):
    """Desired state of a ScrapePool."""

    redis: RedisSpec = Field(description="The pool's Redis.")
    worker: WorkerSpec = Field(default_factory=WorkerSpec, description="Worker pods.")
    replicas: int | None = Field(
        default=None, ge=0, le=1000, description="Fixed worker count, used when autoscaling is disabled."
    )
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec, description="Autoscaling policy.")
    queue: QueueSpec = Field(default_factory=QueueSpec, description="Queue behaviour.")
    defaults: PoolDefaults | None = Field(default=None, description="Defaults inherited by the pool's jobs.")
    on_complete_jobs: list[OnCompleteJobTemplate] | None = Field(
        default=None,
        max_length=MAX_ON_COMPLETE_JOBS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Jobs the pool's ScrapeJobs may run once they have finished, by name "
        "(spec.onComplete.job): a job author picks one and passes parameters, the pool's author writes "
        "what runs and as whom.",
    )

    @field_validator("on_complete_jobs")
    @classmethod
    def _unique_templates(cls, value: list[OnCompleteJobTemplate] | None) -> list[OnCompleteJobTemplate] | None:
        names = [t.name for t in value or []]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"onCompleteJobs names must be unique, repeated: {', '.join(repeated)}")
        return value

    def on_complete_job(self, name: str) -> OnCompleteJobTemplate | None:
        return next((t for t in self.on_complete_jobs or [] if t.name == name), None)

    job_limits: JobLimits | None = Field(
        default=None,
        description="Ceilings every job of the pool stays within (body size, rates, URLs, results and dead "
        "letters kept, priority); a job may ask for less, never more.",
    )
    proxies: ProxiesSpec | None = Field(
        default=None,
        description="Upstream proxies the pool's jobs fetch through, in named groups; a job picks a group by "
        "name (spec.proxy.group), else the default group is used, else requests go direct.",
    )
    session_seeds: list[SessionSeed] | None = Field(
        default=None,
        max_length=16,
        description="Cookies the pool offers its jobs' sessions (spec.session.seed names one): a login made "
        "elsewhere. Every job of the pool may name a seed, so offer only what all of them may use.",
    )
    tenancy: TenancySpec | None = Field(
        default=None,
        description="The tenants (namespaces) that share the pool: weights, quotas, priority classes and "
        "ceilings, set by the platform. Absent: every job's priority is its own within jobLimits.maxPriority, "
        "and claims are shared among jobs only.",
    )
    archive: PoolArchiveSpec | None = Field(
        default=None,
        description="Where jobs' WARC archives live (spec.archive, spec.archiveSource of a ScrapeJob).",
    )

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> Self:
        for where, value, limit in self._default_and_limit():
            if value is not None and limit is not None and value > limit:
                name = where.rsplit(".", 1)[1]
                raise ValueError(
                    f"defaults.{where} {format_number(value)} exceeds jobLimits.{name} {format_number(limit)}"
                )
        return self

    @model_validator(mode="after")
    def _proxy_secrets_mounted(self) -> Self:
        mounted = set(self.worker.secrets or ())
        for group in self.proxies.groups if self.proxies is not None else ():
            if group.secret_ref.name not in mounted:
                raise ValueError(
                    f"proxies.groups[{group.name}].secretRef names Secret {group.secret_ref.name!r}, which "
                    f"spec.worker.secrets does not list: the workers read the proxy URLs from the mounted Secret"
                )
        return self

    @model_validator(mode="after")
    def _session_seeds_mounted(self) -> Self:
        mounted = set(self.worker.secrets or ())
        names = [s.name for s in self.session_seeds or ()]
        if len(set(names)) != len(names):
            raise ValueError("sessionSeeds names must be unique")
        for seed in self.session_seeds or ():
            if seed.secret_ref.name not in mounted:
                raise ValueError(
                    f"sessionSeeds[{seed.name}].secretRef names Secret {seed.secret_ref.name!r}, which "
                    "spec.worker.secrets does not list"
                )
        return self

    @model_validator(mode="after")
    def _rule_proxy_groups_defined(self) -> Self:
        politeness = self.defaults.politeness if self.defaults is not None else None
        defined = {g.name for g in self.proxies.groups} if self.proxies is not None else set()
        for rule in (politeness.domains or ()) if politeness is not None else ():
            if rule.proxy_group and rule.proxy_group != "none" and rule.proxy_group not in defined:
                raise ValueError(
                    f"defaults.politeness.domains[{rule.host}].proxyGroup {rule.proxy_group!r} is not a group of "
                    "spec.proxies.groups"
                )
        return self

    @model_validator(mode="after")
    def _rules_within_limits(self) -> Self:
        problem = pool_rule_above_limits(self.defaults, self.job_limits)
        if problem is not None:
            raise ValueError(problem)
        return self

    def _default_and_limit(self) -> list[tuple[str, float | None, float | None]]:
        """(the pool default's path, its value, the ceiling set on it), each None when unset."""
        defaults = self.defaults or PoolDefaults()
        request, politeness = defaults.request, defaults.politeness
        limits = self.job_limits or JobLimits()
        return [
            (
                "request.maxResponseBytes",
                request.max_response_bytes if request else None,
                limits.max_response_bytes,
            ),
            (
                "politeness.requestsPerSecond",
                politeness.requests_per_second if politeness else None,
                limits.requests_per_second,
            ),
            (
                "politeness.maxConcurrencyPerDomain",
                politeness.max_concurrency_per_domain if politeness else None,
                limits.max_concurrency_per_domain,
            ),
        ]

    def ceilings(self) -> Ceilings:
        """The pool's job limits resolved: each as set, else its default, raised to the pool's own default
        for the setting where that is higher (the pool's author granted it to every job already)."""
        limits = self.job_limits or JobLimits()
        (_, body, _), (_, rate, _), (_, conc, _) = self._default_and_limit()

        def pick(value: Any, default: Any, pool_default: Any = None) -> Any:
            return value if value is not None else max(default, pool_default or default)

        return Ceilings(
            max_response_bytes=pick(limits.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES, body),
            requests_per_second=pick(limits.requests_per_second, DEFAULT_REQUESTS_PER_SECOND, rate),
            max_concurrency_per_domain=pick(limits.max_concurrency_per_domain, DEFAULT_CONCURRENCY_PER_DOMAIN, conc),
            max_urls_per_job=pick(limits.max_urls_per_job, DEFAULT_URLS_PER_JOB),
            max_results_retained=pick(limits.max_results_retained, DEFAULT_RESULTS_RETAINED),
            max_dead_letters_retained=pick(limits.max_dead_letters_retained, DEFAULT_DEAD_LETTERS_RETAINED),
            max_priority=pick(limits.max_priority, DEFAULT_MAX_PRIORITY),
            max_format_bytes=pick(limits.max_format_bytes, DEFAULT_FORMAT_BYTES),
        )


def pool_rule_above_limits(defaults: PoolDefaults | None, limits: JobLimits | None) -> str | None:
    """Which of the pool's domain rules asks for more than a ceiling its jobLimits set, or None. Like the pool's
    defaults, its rules stay within the limits its author set; a ceiling left unset does not bind them."""
    rules = defaults.politeness.domains if defaults and defaults.politeness else None
    limits = limits or JobLimits()
    for i, rule in enumerate(rules or ()):
        rate = rule.rate()
        if rate is not None and limits.requests_per_second is not None and rate > limits.requests_per_second:
            return (
                f"defaults.politeness.domains[{i}] ({rule.host}): {rule.rate_text()} exceeds "
                f"jobLimits.requestsPerSecond {format_number(limits.requests_per_second)}"
            )
        conc, ceiling = rule.max_concurrency_per_domain, limits.max_concurrency_per_domain
        if conc is not None and ceiling is not None and conc > ceiling:
            return (
                f"defaults.politeness.domains[{i}] ({rule.host}): maxConcurrencyPerDomain {conc} exceeds "
                f"jobLimits.maxConcurrencyPerDomain {ceiling}"
            )
    return None


# The pool defaults that JobLimits cap, for the API server (ScrapePoolSpec._defaults_within_limits).
DEFAULTS_WITHIN_LIMITS_RULES = [
    {
        "rule": f"!has(self.jobLimits) || !has(self.jobLimits.{limit}) || !has(self.defaults) "
        f"|| !has(self.defaults.{group}) || !has(self.defaults.{group}.{field}) "
        f"|| self.defaults.{group}.{field} <= self.jobLimits.{limit}",
        "message": f"defaults.{group}.{field} exceeds jobLimits.{limit}",
        "fieldPath": f".defaults.{group}.{field}",
    }
    for group, field, limit in (
        ("request", "maxResponseBytes", "maxResponseBytes"),
        ("politeness", "requestsPerSecond", "requestsPerSecond"),
        ("politeness", "maxConcurrencyPerDomain", "maxConcurrencyPerDomain"),
    )
] + [
    # The same for the pool's domain rules (pool_rule_above_limits).
    {
        "rule": f"!has(self.jobLimits) || !has(self.jobLimits.{limit}) || !has(self.defaults) "
        f"|| !has(self.defaults.politeness) || !has(self.defaults.politeness.domains) "
        f"|| self.defaults.politeness.domains.all(r, {check})",
        "message": f"a rule of defaults.politeness.domains exceeds jobLimits.{limit}",
        "fieldPath": ".defaults.politeness.domains",
    }
    for limit, check in (
        (
            "requestsPerSecond",
            "(!has(r.requestsPerSecond) || r.requestsPerSecond <= self.jobLimits.requestsPerSecond) && "
            "(!has(r.delaySeconds) || 1.0 / r.delaySeconds <= self.jobLimits.requestsPerSecond)",
        ),
        (
            "maxConcurrencyPerDomain",
            "!has(r.maxConcurrencyPerDomain) || r.maxConcurrencyPerDomain <= self.jobLimits.maxConcurrencyPerDomain",
        ),
    )
]


class QueueSignals(TrawlModel):
    """What the queue looked like at the last poll."""

    ready: int = Field(default=0, ge=0, description="Tasks waiting to be claimed.")
    held: int = Field(
        default=0,
        ge=0,
        description="Pools with spec.tenancy: ready tasks of tenants a quota holds back (not in ready: more "
        "workers would not run them, so they do not scale the pool).",
    )
    delayed: int = Field(default=0, ge=0, description="Tasks waiting for a retry or a rate limit.")
    in_flight: int = Field(default=0, ge=0, description="Tasks claimed by workers.")
    dead: int = Field(default=0, ge=0, description="Dead-lettered tasks of live jobs.")
    throughput_per_second: float = Field(default=0, ge=0, description="Tasks finished per second, recently.")
    failure_rate: float = Field(default=0, ge=0, le=1, description="Share of recent attempts that failed.")
    mean_task_seconds: float = Field(default=0, ge=0, description="Mean time a worker spends per task.")


class ScalingDecision(TrawlModel):
    """The autoscaler's latest change."""

    time: datetime | None = Field(default=None, description="When replicas last changed.")
    from_replicas: int = Field(default=0, ge=0, description="Replicas before.")
    to_replicas: int = Field(default=0, ge=0, description="Replicas after.")
    reason: str = Field(default="", max_length=1024, description="Why.")


class TenantStatus(TrawlModel):
    """One tenant's use of the pool, as the queue counted it at the last poll."""

    tenant: str = Field(max_length=253, description="The tenant (a namespace).")
    weight: int = Field(default=1, ge=1, description="Its share of claims while several tenants have ready work.")
    in_flight: int = Field(default=0, ge=0, description="Tasks its jobs have claimed now.")
    claimed_total: int = Field(default=0, ge=0, description="Tasks its jobs claimed since it first claimed.")
    pages_today: int = Field(default=0, ge=0, description="Tasks its jobs claimed this UTC day.")
    browser_seconds_today: float = Field(
        default=0,
        ge=0,
        description="Seconds its jobs' browser tasks held a browser page this UTC day, every attempt (what its "
        "browserSecondsPerDay quota counts).",
    )
    throttled: str | None = Field(
        default=None,
        max_length=64,
        description="The quota holding its ready work back (inFlight, requestsPerSecond, pagesPerDay); absent "
        "when none is.",
    )
    throttled_message: str | None = Field(default=None, max_length=1024, description="The quota's figure.")
    throttled_since: datetime | None = Field(default=None, description="Since when the quota holds it back.")
    queued: int = Field(default=0, ge=0, description="Tasks of its jobs ready or delayed now.")
    queue_full_message: str | None = Field(
        default=None,
        max_length=1024,
        description="Set while its URLs-queued quota stops its jobs' seeds: the quota's figure.",
    )


MAX_TENANTS_ON_STATUS = 100


class ScrapePoolStatus(TrawlModel):
    """Observed state of a ScrapePool, written by the operator."""

    observed_generation: int = Field(default=-1, description="The .metadata.generation the status reflects.")
    replicas: int = Field(default=0, ge=0, description="Worker pods that exist.")
    ready_replicas: int = Field(default=0, ge=0, description="Worker pods that are ready.")
    desired_replicas: int = Field(default=0, ge=0, description="Replicas the autoscaler asks for.")
    selector: str | None = Field(default=None, description="Label selector of the worker pods (scale subresource).")
    queue: QueueSignals | None = Field(default=None, description="Queue signals.")
    last_scale: ScalingDecision | None = Field(default=None, description="The last scaling decision.")
    scaling_reason: str | None = Field(default=None, max_length=1024, description="Why replicas are what they are.")
    pod_startup_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Measured worker pod start-up (creation to Ready, median of the last 10 pods) that the "
        "autoscaler uses; absent before the first pod was Ready (it then assumes 15 s).",
    )
    deployment: str | None = Field(default=None, description="Name of the worker Deployment.")
    proxies: list[ProxyStatus] | None = Field(
        default=None, max_length=50, description="Pools with proxy groups: each proxy's use and health."
    )
    tenants: list[TenantStatus] | None = Field(
        default=None,
        max_length=MAX_TENANTS_ON_STATUS,
        description=f"Pools with spec.tenancy: each tenant's use of the pool (the throttled first, at most "
        f"{MAX_TENANTS_ON_STATUS}).",
    )
    conditions: list[Condition] | None = Field(
        default=None, description="Ready, Reconciling, Stalled, Degraded, ScalingLimited, DataLost."
    )
    queue_epoch: str | None = Field(
        default=None,
        max_length=64,
        description="The Redis data epoch the pool last saw; Redis answering with another one lost its data "
        "(condition DataLost).",
    )
