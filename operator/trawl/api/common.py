"""Shared building blocks of the Trawl API: the base model, conditions, references.

Every model here is also the source of a CRD schema (see :mod:`trawl.api.crd`), so field
descriptions are user documentation: they appear in ``kubectl explain``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

# Plain Python, read by the workers without pydantic (trawl.api.plain); exported here as before.
from .plain import HTTP_URL_PATTERN as HTTP_URL_PATTERN
from .plain import check_http_url as check_http_url
from .plain import check_url_parses as check_url_parses

# Kubernetes object names that end up in labels and Redis keys: DNS-1123 labels.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
CAMEL_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class TrawlModel(BaseModel):
    """Base of all API models: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        validate_default=True,
        # Validators are built on a model's first use, not when its module is imported: a worker parses
        # a handful of the API's models (its job spec) and need not build the rest at start-up.
        defer_build=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase, only fields that were set or differ."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


HttpURL = Annotated[
    str,
    Field(min_length=8, max_length=2048, pattern=HTTP_URL_PATTERN),
    AfterValidator(check_http_url),
]
"""An absolute http:// or https:// URL."""

DNSLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(TrawlModel):
    """A condition in the shape of metav1.Condition, read by kubectl wait, kstatus, Argo CD and Flux."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Type of condition in CamelCase, e.g. Ready, Complete.",
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CAMEL_REASON_PATTERN,
        description="Programmatic identifier of the last transition, in CamelCase.",
    )
    message: str = Field(default="", max_length=32768, description="Human-readable details of the transition.")
    last_transition_time: datetime = Field(
        description="When the condition last changed status (RFC 3339).",
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The .metadata.generation the condition was computed from.",
    )


class SecretKeyRef(TrawlModel):
    """A key of a Secret in the referring object's namespace; for a ScrapeJob, in its pool's namespace (a Secret
    the pool mounts into its workers)."""

    name: DNSLabel = Field(description="Name of the Secret.")
    key: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key within the Secret.",
    )


class SecretUse(StrEnum):
    """What a job may use a Secret key for (a ScrapePool's ``worker.secretKeys`` declares it per key)."""

    WEBHOOK_SIGNING_KEY = "WebhookSigningKey"  # output.webhook.secretRef, onComplete.webhook.secretRef
    POSTGRES_PASSWORD = "PostgresPassword"  # output.postgres.passwordSecretRef
    S3_ACCESS_KEY_ID = "S3AccessKeyId"  # output.s3.accessKeyIdSecretRef
    S3_SECRET_ACCESS_KEY = "S3SecretAccessKey"  # output.s3.secretAccessKeySecretRef


class LocalObjectReference(TrawlModel):
    """A reference to an object by name in the same namespace."""

    name: DNSLabel = Field(description="Name of the object.")


def utcnow() -> datetime:
    """Now, timezone-aware, truncated to seconds (Kubernetes timestamps carry no fraction)."""
    return datetime.now(UTC).replace(microsecond=0)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it (``...Z``), or None when absent or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a Z suffix, as Kubernetes writes timestamps."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_number(value: float) -> str:
    """A number as a user wrote it: 1048576 and 0.5, never 1.04858e+06."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def validation_message(exc: ValidationError, root: str = "spec") -> str:
    """The first five problems a model found in a manifest, as one line naming each field (``spec.x.y: ...``)."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{root}.{loc}: {err['msg']}" if loc else f"{root}: {err['msg']}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
