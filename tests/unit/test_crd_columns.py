"""`kubectl get` columns: each reads a field the CRD schema declares, and the derived ones are right."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from trawl.api.crd import all_crds
from trawl.operator.job.status import human_duration


def _crds() -> dict[str, dict[str, Any]]:
    return {doc["spec"]["names"]["kind"]: doc for doc in (yaml.safe_load(t) for t in all_crds().values())}


def _has_path(schema: dict[str, Any], path: str) -> bool:
    node = schema
    for part in re.sub(r"\[[^\]]*\]", "", path).strip(".").split("."):
        if node.get("type") == "array":
            node = node["items"]
        props = node.get("properties") or {}
        if part not in props:
            return False
        node = props[part]
    return True


@pytest.mark.parametrize("kind", ["ScrapeJob", "ScrapePool", "CronScrapeJob"])
def test_every_column_reads_a_declared_field(kind: str) -> None:
    version = _crds()[kind]["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"].startswith(".metadata."):
            continue  # ObjectMeta: not in the CRD's schema, always there
        assert _has_path(schema, column["jsonPath"]), (kind, column)


def test_the_columns_users_expect() -> None:
    crds = _crds()

    def columns(kind: str) -> dict[str, dict[str, Any]]:
        return {c["name"]: c for c in crds[kind]["spec"]["versions"][0]["additionalPrinterColumns"]}

    job = columns("ScrapeJob")
    assert job["Progress"]["jsonPath"] == ".status.progressText" and job["Progress"]["type"] == "string"
    assert job["Duration"]["jsonPath"] == ".status.duration"
    assert columns("ScrapePool")["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    cron = columns("CronScrapeJob")
    assert {"Active", "Last", "Next"} <= set(cron)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45.9, "45s"),
        (60, "1m"),
        (133, "2m13s"),
        (3600, "1h"),
        (3900, "1h5m"),
        (86400 * 3 + 4 * 3600, "3d4h"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text
