"""The generated CRDs against a real kube-apiserver: they install, accept the samples, and the API
server itself rejects invalid objects with errors that name the offending field."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel

import spec_strategies as strat
from manifest_cases import INVALID, VALID_JOB, Case
from trawl.api import CronScrapeJobSpec, ScrapeJobSpec, ScrapePoolSpec
from trawl.api.crd import KINDS
from trawl.dev.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "manifests" / "samples"
MODELS: dict[str, type[BaseModel]] = {
    "ScrapeJob": ScrapeJobSpec,
    "ScrapePool": ScrapePoolSpec,
    "CronScrapeJob": CronScrapeJobSpec,
}


def _job_manifest(name: str) -> dict[str, object]:
    return {"apiVersion": "trawl.dev/v1alpha1", "kind": "ScrapeJob", "metadata": {"name": name}, "spec": VALID_JOB}


def test_committed_crds_apply_and_are_established(control_plane: ControlPlane) -> None:
    out = control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "manifests" / "crds"))
    for kind in KINDS:
        assert f"customresourcedefinition.apiextensions.k8s.io/{kind.crd_name} serverside-applied" in out.stdout
        crd = json.loads(control_plane.kubectl("get", "crd", kind.crd_name, "-o", "json").stdout)
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True", conditions
        assert conditions.get("NamesAccepted") == "True", conditions
        assert "NonStructuralSchema" not in conditions, crd["status"]["conditions"]
        assert crd["status"]["acceptedNames"]["shortNames"] == kind.short_names
        assert crd["status"]["acceptedNames"]["categories"] == ["trawl"]


def test_every_sample_is_accepted(control_plane: ControlPlane, namespace: str) -> None:
    files = sorted(p for p in SAMPLES.glob("*.yaml") if p.name != "kustomization.yaml")
    listed = yaml.safe_load((SAMPLES / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == [p.name for p in files], "manifests/samples/kustomization.yaml must list every sample"
    kinds = set()
    for path in files:
        out = control_plane.kubectl(
            "apply", "--server-side", "--validate=strict", "-n", namespace, "-f", str(path), "-o", "json"
        )
        obj = json.loads(out.stdout)
        kinds.add(obj["kind"])
        assert obj["metadata"]["namespace"] == namespace
    assert kinds == {"ScrapeJob", "ScrapePool", "CronScrapeJob"}
    # The kustomization renders and applies too (dry run on the server: the objects already exist).
    control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-n", namespace, "-k", str(SAMPLES))
    names = control_plane.kubectl("get", "trawl", "-n", namespace, "-o", "name").stdout.split()
    assert len(names) == len(files), names


def test_at_least_fifteen_invalid_cases() -> None:
    assert len(INVALID) >= 15


@pytest.fixture(scope="module")
def custom_api(control_plane: ControlPlane) -> Iterator[CustomObjectsApi]:
    client = control_plane.api_client()
    try:
        yield CustomObjectsApi(client)
    finally:
        client.close()


def _plural(kind: str) -> str:
    return next(k.plural for k in KINDS if k.kind == kind)


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_api_server_rejects_invalid(custom_api: CustomObjectsApi, namespace: str, case: Case) -> None:
    """Sent with the raw API client (no client-side validation): the API server alone says no."""
    plural = _plural(case.kind)
    args = ("trawl.dev", "v1alpha1", namespace, plural)
    with pytest.raises(ApiException) as info:
        if case.update is None:
            custom_api.create_namespaced_custom_object(*args, case.manifest(), field_validation="Strict")
        else:
            custom_api.create_namespaced_custom_object(*args, case.manifest(), field_validation="Strict")
            custom_api.patch_namespaced_custom_object(*args, case.name, {"spec": case.update})
    error = info.value
    assert error.status in (400, 422), (error.status, error.body)
    body = json.loads(error.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert case.server_field in body["message"], body["message"]
    # Nothing of the rejected object (or change) was stored.
    if case.update is None:
        with pytest.raises(ApiException) as missing:
            custom_api.get_namespaced_custom_object(*args, case.name)
        assert missing.value.status == 404
    else:
        stored = custom_api.get_namespaced_custom_object(*args, case.name)["spec"]
        for key, value in case.update.items():
            assert stored[key] != value


def test_rejection_reads_well_in_kubectl(control_plane: ControlPlane, namespace: str) -> None:
    case = next(c for c in INVALID if c.id == "crawl-scope-enum")
    result = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(case.manifest()), check=False)
    assert result.returncode == 1
    assert 'The ScrapeJob "bad" is invalid' in result.stderr
    assert 'spec.crawl.scope: Unsupported value: "Everywhere"' in result.stderr
    assert '"SameHost", "SameDomain"' in result.stderr
    unknown = next(c for c in INVALID if c.id == "unknown-field")
    strict = control_plane.kubectl(
        "create", "--validate=strict", "-n", namespace, "-f", "-", input=json.dumps(unknown.manifest()), check=False
    )
    assert strict.returncode == 1
    assert 'strict decoding error: unknown field "spec.colour"' in strict.stderr, strict.stderr


def test_explain_prints_field_documentation(control_plane: ControlPlane) -> None:
    out = control_plane.kubectl("explain", "scrapejob.spec.retry").stdout
    assert "FIELD: retry <Object>" in out
    assert "Retry policy; unset fields use the pool's." in out
    for field_name, doc in [
        ("maxAttempts", "Attempts per URL"),
        ("backoff", "Fixed or Exponential"),
        ("jitter", "Random fraction"),
        ("honorRetryAfter", "Retry-After"),
    ]:
        assert field_name in out, out
        assert doc in out, out
    top = control_plane.kubectl("explain", "scrapejob").stdout
    assert "A ScrapeJob fetches a list of URLs" in top


def test_get_prints_printer_columns(control_plane: ControlPlane, namespace: str) -> None:
    manifest = _job_manifest("cols")
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    header = control_plane.kubectl("get", "sj", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "POOL", "PHASE", "PROGRESS", "SUCCEEDED", "DEAD", "TOTAL", "DURATION", "AGE"]
    wide = control_plane.kubectl("get", "sj", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == [
        "NAME",
        "POOL",
        "PHASE",
        "PROGRESS",
        "SUCCEEDED",
        "DEAD",
        "TOTAL",
        "DURATION",
        "PRIORITY",
        "POOL-NAMESPACE",
        "MESSAGE",
        "AGE",
    ]
    assert wide[1].split()[:2] == ["cols", "default"]
    for short_name in ("sp", "csj"):  # the other short names resolve
        empty = control_plane.kubectl("get", short_name, "-n", namespace)
        assert empty.stderr.startswith("No resources found"), empty.stderr


def test_new_scrapejob_reads_observed_generation_minus_one(control_plane: ControlPlane, namespace: str) -> None:
    manifest = _job_manifest("fresh")
    out = control_plane.kubectl("create", "-n", namespace, "-f", "-", "-o", "json", input=json.dumps(manifest))
    obj = json.loads(out.stdout)
    assert obj["status"]["observedGeneration"] == -1
    assert obj["metadata"]["generation"] == 1
    # Spec defaults are applied by the API server too; priority has none there (the operator resolves it:
    # 5, or on a pool with tenancy its class), so the job's status says what it got.
    assert "priority" not in obj["spec"]
    assert obj["spec"]["suspend"] is False


def test_status_subresource_keeps_declared_fields(control_plane: ControlPlane, namespace: str) -> None:
    manifest = _job_manifest("st")
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    status = {
        "status": {
            "observedGeneration": 1,
            "phase": "Running",
            "progress": 40,
            "progressText": "40%",
            "counts": {"total": 10, "succeeded": 4, "deadLettered": 1},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Running",
                    "message": "4/10",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 1,
                },
            ],
            "undeclared": "dropped",
        }
    }
    control_plane.kubectl(
        "patch", "sj", "st", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    obj = json.loads(control_plane.kubectl("get", "sj", "st", "-n", namespace, "-o", "json").stdout)
    assert obj["status"]["phase"] == "Running"
    assert obj["status"]["counts"]["succeeded"] == 4
    assert obj["status"]["conditions"][0]["reason"] == "Running"
    assert "undeclared" not in obj["status"]
    row = control_plane.kubectl("get", "sj", "st", "-n", namespace, "--no-headers").stdout.split()
    assert row[:7] == ["st", "default", "Running", "40%", "4", "1", "10"]


@pytest.fixture(scope="module")
def dry_run_namespace(control_plane: ControlPlane) -> str:
    return control_plane.create_namespace(f"dry-run-{uuid.uuid4().hex[:6]}")


_AGREE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(
    ("kind", "strategy"),
    [
        ("ScrapeJob", strat.scrape_job_spec),
        ("ScrapePool", strat.scrape_pool_spec),
        ("CronScrapeJob", strat.cron_scrape_job_spec),
    ],
)
def test_api_server_accepts_what_pydantic_accepts(
    custom_api: CustomObjectsApi, dry_run_namespace: str, kind: str, strategy: strat.Strategy
) -> None:
    """The CRD schema and the models agree: generated valid specs pass the API server (dry run), and
    the API server stores them unchanged apart from defaults the models also apply."""
    plural = _plural(kind)

    @_AGREE
    @given(strategy)
    def check(spec: dict[str, Any]) -> None:
        manifest = {"apiVersion": "trawl.dev/v1alpha1", "kind": kind, "metadata": {"name": "gen"}, "spec": spec}
        try:
            stored = custom_api.create_namespaced_custom_object(
                "trawl.dev", "v1alpha1", dry_run_namespace, plural, manifest, dry_run="All", field_validation="Strict"
            )
        except ApiException as exc:
            raise AssertionError(f"API server rejected a spec pydantic accepts: {exc.body}") from exc
        model = MODELS[kind].model_validate(spec)
        assert MODELS[kind].model_validate(stored["spec"]) == model

    check()
