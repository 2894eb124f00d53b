"""CustomResourceDefinitions generated from the pydantic models.

The models are the single source of truth: ``trawl crd`` writes the YAML under ``manifests/crds``
and ``charts/trawl/crds``, and a test fails when the committed files drift from this output.

The pydantic JSON schema is turned into a Kubernetes *structural* schema: references inlined,
``anyOf [X, null]`` collapsed to X (the API server prunes nulls), JSON-Schema-2020 numeric
exclusives rewritten to the OpenAPI v3.0 boolean form, titles dropped, and Kubernetes extensions
(list-map keys, CEL rules, preserve-unknown-fields) added where the schema alone cannot say it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from .cronscrapejob import REVERSED_RANGE_RULE, CronScrapeJobSpec, CronScrapeJobStatus
from .domainrules import ONE_RATE_RULE
from .naming import GROUP, VERSION
from .scrapejob import PG_HOST_MESSAGE, PG_HOST_PATTERN, URL_RANGE_LENGTH_RULE, ScrapeJobSpec, ScrapeJobStatus
from .scrapepool import DEFAULTS_WITHIN_LIMITS_RULES, REDIS_DB_RULE, ScrapePoolSpec, ScrapePoolStatus

Schema = dict[str, Any]

# CEL rules that need the whole object or old/new comparison, keyed by the model they guard.
_RULES: dict[str, list[dict[str, str]]] = {
    "ScrapeJobSpec": [
        {
            "rule": "has(self.urls) || has(self.urlRanges) || (has(self.sitemaps) && has(self.sitemaps.urls))",
            "message": "a ScrapeJob needs urls, urlRanges or sitemaps.urls",
            "fieldPath": ".urls",
        },
    ],
    "SitemapSpec": [
        {
            "rule": "has(self.urls) || (has(self.fromRobotsTxt) && self.fromRobotsTxt)",
            "message": "sitemaps needs urls or fromRobotsTxt",
        },
    ],
    "UrlRange": [
        {"rule": "self.end >= self.start", "message": "end must be greater than or equal to start"},
        URL_RANGE_LENGTH_RULE,
    ],
    "OutputSpec": [
        {
            "rule": "self.sink != 'JsonLines' || has(self.jsonLines)",
            "message": "jsonLines is required when sink is JsonLines",
            "fieldPath": ".jsonLines",
        },
        {
            "rule": "self.sink != 'Webhook' || has(self.webhook)",
            "message": "webhook is required when sink is Webhook",
            "fieldPath": ".webhook",
        },
        {
            "rule": "self.sink != 'Files' || has(self.files)",
            "message": "files is required when sink is Files",
            "fieldPath": ".files",
        },
    ],
    "PostgresSink": [
        {"rule": f"self.host.matches(r'{PG_HOST_PATTERN}')", "message": PG_HOST_MESSAGE, "fieldPath": ".host"}
    ],
    "RetrySpec": [
        {
            "rule": "!has(self.initialDelaySeconds) || !has(self.maxDelaySeconds) "
            "|| self.initialDelaySeconds <= self.maxDelaySeconds",
            "message": "initialDelaySeconds must not exceed maxDelaySeconds",
            "fieldPath": ".initialDelaySeconds",
        }
    ],
    "RedisSpec": [
        {
            "rule": "(has(self.mode) && self.mode == 'Sentinel') || has(self.url) != has(self.urlSecretRef)",
            "message": "exactly one of url or urlSecretRef must be set",
        },
        {
            "rule": "!has(self.mode) || self.mode != 'Sentinel' || (has(self.sentinels) && has(self.masterName))",
            "message": "mode Sentinel needs both sentinels and masterName",
        },
        {
            "rule": "!has(self.mode) || self.mode != 'Sentinel' || (!has(self.url) && !has(self.urlSecretRef))",
            "message": "mode Sentinel takes sentinels and masterName, not url or urlSecretRef",
        },
        {
            "rule": "(has(self.mode) && self.mode == 'Sentinel') "
            "|| (!has(self.sentinels) && !has(self.masterName) && !has(self.sentinelPasswordSecretRef))",
            "message": "sentinels, masterName and sentinelPasswordSecretRef apply to mode Sentinel only",
        },
        REDIS_DB_RULE,
    ],
    "CronScrapeJobSpec": [REVERSED_RANGE_RULE],
    "ScrapePoolSpec": DEFAULTS_WITHIN_LIMITS_RULES,
    "DomainRule": [ONE_RATE_RULE],
    "WorkerSpec": [
        {
            "rule": "!has(self.secretKeys) || self.secretKeys.all(k, has(self.secrets) && k.name in self.secrets)",
            "message": "every secretKeys entry must name a Secret listed in secrets",
            "fieldPath": ".secretKeys",
        }
    ],
    "AutoscalingSpec": [
        {
            "rule": "self.minReplicas <= self.maxReplicas",
            "message": "minReplicas must not exceed maxReplicas",
            "fieldPath": ".minReplicas",
        }
    ],
}

# Immutable after creation: changing what a running job fetches or where it runs cannot be honoured.
_SCRAPEJOB_IMMUTABLE = [
    {"rule": "self.pool == oldSelf.pool", "message": "pool is immutable", "fieldPath": ".pool"},
    {
        "rule": "has(self.poolNamespace) == has(oldSelf.poolNamespace) "
        "&& (!has(self.poolNamespace) || self.poolNamespace == oldSelf.poolNamespace)",
        "message": "poolNamespace is immutable",
        "fieldPath": ".poolNamespace",
    },
    {
        "rule": "has(self.urls) == has(oldSelf.urls) && (!has(self.urls) || self.urls == oldSelf.urls)",
        "message": "urls is immutable",
        "fieldPath": ".urls",
    },
    {
        "rule": "has(self.urlRanges) == has(oldSelf.urlRanges) "
        "&& (!has(self.urlRanges) || self.urlRanges == oldSelf.urlRanges)",
        "message": "urlRanges is immutable",
        "fieldPath": ".urlRanges",
    },
    {
        "rule": "has(self.sitemaps) == has(oldSelf.sitemaps) "
        "&& (!has(self.sitemaps) || self.sitemaps == oldSelf.sitemaps)",
        "message": "sitemaps is immutable",
        "fieldPath": ".sitemaps",
    },
]


def _name_at_most(length: int) -> list[dict[str, str]]:
    """Names end up in labels and Redis keys; the message names the field, as a root rule cannot."""
    message = f"metadata.name must be no more than {length} characters"
    return [{"rule": f"self.metadata.name.size() <= {length}", "message": message}]


def _inline(node: Any, defs: dict[str, Schema], stack: tuple[str, ...] = ()) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, stack) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in stack:
            raise ValueError(f"recursive model {name} cannot be a structural schema")
        target = _inline(copy.deepcopy(defs[name]), defs, (*stack, name))
        target.setdefault("x-trawl-model", name)
        # Field-level keywords (description, default) override the referenced model's.
        extra = {k: _inline(v, defs, stack) for k, v in node.items() if k != "$ref"}
        return {**target, **extra}
    return {key: _inline(value, defs, stack) for key, value in node.items()}


def _structural(node: Any) -> Any:
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        branches = [b for b in any_of if b.get("type") != "null"]
        if sorted(str(b.get("type")) for b in branches) == ["integer", "string"]:
            # A number or a word (e.g. claimBatch: 16 or auto): Kubernetes' int-or-string; the model validates.
            branches = [{"x-kubernetes-int-or-string": True}]
        if len(branches) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {any_of}")
        merged = {**branches[0], **node}
        node = merged
    node.pop("title", None)
    if node.get("default", 0) is None:
        node.pop("default")
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node and not isinstance(node[bound], bool):
            node[flag] = node.pop(bound)
            node[bound] = True
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("additionalProperties") is False:
        node.pop("additionalProperties")
    if node.get("type") == "object" and node.get("additionalProperties") in (True, {}) and "properties" not in node:
        node.pop("additionalProperties")
        node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "object" and "additionalProperties" not in node and "properties" not in node:
        node["x-kubernetes-preserve-unknown-fields"] = True
    model = node.pop("x-trawl-model", None)
    if model in _RULES:
        node["x-kubernetes-validations"] = copy.deepcopy(_RULES[model])
    out: Schema = {}
    # A stable, readable key order: what a reader of the YAML looks for first.
    order = [
        "description",
        "type",
        "format",
        "enum",
        "default",
        "minimum",
        "exclusiveMinimum",
        "maximum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "maxProperties",
        "required",
        "properties",
        "items",
        "additionalProperties",
    ]
    for key in order:
        if key in node:
            if key == "properties":
                out[key] = {name: _structural(sub) for name, sub in node[key].items()}
            elif key in ("items", "additionalProperties"):
                out[key] = _structural(node[key])
            else:
                out[key] = node[key]
    for key, value in node.items():
        if key not in out:
            out[key] = _structural(value)
    if "description" in out:
        out["description"] = " ".join(str(out["description"]).split())
    return out


def _mark_condition_lists(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "conditions" and isinstance(value, dict) and value.get("type") == "array":
                value["x-kubernetes-list-type"] = "map"
                value["x-kubernetes-list-map-keys"] = ["type"]
            _mark_condition_lists(value)
    elif isinstance(node, list):
        for item in node:
            _mark_condition_lists(item)


def model_schema(model: type[BaseModel]) -> Schema:
    """The structural OpenAPI v3 schema of one model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    raw["x-trawl-model"] = model.__name__
    schema: Schema = _structural(_inline(raw, defs))
    _mark_condition_lists(schema)
    return schema


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    singular: str
    short_names: list[str]
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    columns: list[dict[str, Any]]
    spec_rules: list[dict[str, str]] = field(default_factory=list)
    root_rules: list[dict[str, str]] = field(default_factory=list)
    scale: dict[str, str] | None = None
    adjust: Callable[[Schema], None] | None = None

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

KINDS: list[Kind] = [
    Kind(
        kind="ScrapeJob",
        plural="scrapejobs",
        singular="scrapejob",
        short_names=["sj"],
        spec=ScrapeJobSpec,
        status=ScrapeJobStatus,
        description="A ScrapeJob fetches a list of URLs, or crawls from seed URLs, with a ScrapePool's workers, "
        "extracts fields from each page and writes the results to a sink.",
        columns=[
            {"name": "Pool", "type": "string", "jsonPath": ".spec.pool"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {
                "name": "Progress",
                "type": "string",
                "jsonPath": ".status.progressText",
                "description": "Percent done",
            },
            {"name": "Succeeded", "type": "integer", "jsonPath": ".status.counts.succeeded"},
            {"name": "Dead", "type": "integer", "jsonPath": ".status.counts.deadLettered"},
            {"name": "Total", "type": "integer", "jsonPath": ".status.counts.total"},
            {"name": "Duration", "type": "string", "jsonPath": ".status.duration"},
            {"name": "Priority", "type": "integer", "jsonPath": ".status.priority", "priority": 1},
            {
                "name": "Pool-Namespace",
                "type": "string",
                "jsonPath": ".spec.poolNamespace",
                "description": "The pool's namespace when it is not the job's (a shared pool)",
                "priority": 1,
            },
            {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
            _AGE,
        ],
        spec_rules=_SCRAPEJOB_IMMUTABLE,
        root_rules=_name_at_most(63),
    ),
    Kind(
        kind="ScrapePool",
        plural="scrapepools",
        singular="scrapepool",
        short_names=["sp"],
        spec=ScrapePoolSpec,
        status=ScrapePoolStatus,
        description="A ScrapePool is a Redis queue and the autoscaled worker Deployment that consumes it.",
        columns=[
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "Workers", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
            {"name": "Backlog", "type": "integer", "jsonPath": ".status.queue.ready"},
            {"name": "InFlight", "type": "integer", "jsonPath": ".status.queue.inFlight"},
            {"name": "Throughput", "type": "number", "jsonPath": ".status.queue.throughputPerSecond"},
            {"name": "Reason", "type": "string", "jsonPath": ".status.scalingReason", "priority": 1},
            _AGE,
        ],
        root_rules=_name_at_most(50),
        scale={
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    ),
    Kind(
        kind="CronScrapeJob",
        plural="cronscrapejobs",
        singular="cronscrapejob",
        short_names=["csj"],
        spec=CronScrapeJobSpec,
        status=CronScrapeJobStatus,
        description="A CronScrapeJob creates ScrapeJobs on a cron schedule, as a CronJob creates Jobs.",
        columns=[
            {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
            {"name": "TimeZone", "type": "string", "jsonPath": ".spec.timeZone"},
            {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
            {"name": "Active", "type": "string", "jsonPath": ".status.active[*].name"},
            {"name": "Last", "type": "date", "jsonPath": ".status.lastScheduleTime"},
            {"name": "Next", "type": "string", "jsonPath": ".status.nextScheduleTime"},
            _AGE,
        ],
        root_rules=_name_at_most(52),
    ),
]


def crd_for(kind: Kind) -> dict[str, Any]:
    spec_schema = model_schema(kind.spec)
    spec_schema["description"] = " ".join((kind.spec.__doc__ or "").split())
    if kind.spec_rules:
        spec_schema.setdefault("x-kubernetes-validations", [])
        spec_schema["x-kubernetes-validations"] = [*kind.spec_rules, *spec_schema["x-kubernetes-validations"]]
    status_schema = model_schema(kind.status)
    status_schema["description"] = " ".join((kind.status.__doc__ or "").split())
    # Defaulting the status object makes observedGeneration read -1 before the operator's first
    # write, so kstatus, Argo CD and Flux see a new object as in progress rather than current.
    status_schema["default"] = {"observedGeneration": -1}
    root: Schema = {
        "description": kind.description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of the object."},
            "kind": {"type": "string", "description": "Kind of the object."},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    if kind.root_rules:
        root["x-kubernetes-validations"] = kind.root_rules
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale:
        subresources["scale"] = dict(kind.scale)
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {"app.kubernetes.io/name": "trawl", "app.kubernetes.io/part-of": "trawl"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": kind.short_names,
                "categories": ["trawl"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": subresources,
                    "additionalPrinterColumns": kind.columns,
                }
            ],
        },
    }
    return crd


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)

HEADER = "# Generated by `trawl crd` from the models in operator/trawl/api. Do not edit.\n"


def render(kind: Kind) -> str:
    body = yaml.dump(crd_for(kind), Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return HEADER + body


def all_crds() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    return {f"{GROUP}_{kind.plural}.yaml": render(kind) for kind in KINDS}


DEFAULT_TARGETS = ("manifests/crds", "charts/trawl/crds")


def write_crds(root: Path, targets: tuple[str, ...] = DEFAULT_TARGETS) -> list[Path]:
    written: list[Path] = []
    files = all_crds()
    for target in targets:
        folder = root / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = folder / name
            path.write_text(text)
            written.append(path)
    return written
