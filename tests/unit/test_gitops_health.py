"""The Argo CD health checks in docs/gitops, run in a real Lua 5.1 interpreter (Argo CD's gopher-lua
speaks 5.1) against the cases in each kind's health_test.yaml, Argo CD's own test-file format.

The test objects are also validated against the API models, so the statuses they describe stay the
ones the operator can actually write.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import lua51
from pydantic import BaseModel

from trawl.api.cronscrapejob import CronScrapeJobSpec, CronScrapeJobStatus
from trawl.api.scrapejob import ScrapeJobSpec, ScrapeJobStatus
from trawl.api.scrapepool import ScrapePoolSpec, ScrapePoolStatus
from trawl.operator.job.status import JobFacts, derive_job_status
from trawl.operator.problems import Problem
from trawl.queue.model import JobStats

ROOT = Path(__file__).resolve().parents[2]
GITOPS = ROOT / "docs" / "gitops" / "trawl.dev"
KINDS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "ScrapeJob": (ScrapeJobSpec, ScrapeJobStatus),
    "ScrapePool": (ScrapePoolSpec, ScrapePoolStatus),
    "CronScrapeJob": (CronScrapeJobSpec, CronScrapeJobStatus),
}
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


def _to_lua(runtime: Any, value: Any) -> Any:
    """Nested dicts/lists as Lua tables (lists 1-indexed), the way Argo CD hands `obj` to a script."""
    if isinstance(value, dict):
        return runtime.table_from({k: _to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    return value


def run_health(kind: str, obj: dict[str, Any]) -> dict[str, str]:
    """Run ``<kind>/health.lua`` with the global ``obj`` set, as Argo CD does; return its table."""
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True, register_eval=False)
    runtime.globals().obj = _to_lua(runtime, obj)
    script = (GITOPS / kind / "health.lua").read_text()
    result = runtime.execute(script)
    assert result is not None, f"{kind}/health.lua returned nothing"
    return {"status": result["status"], "message": result["message"]}


def _cases() -> list[Any]:
    out = []
    for kind in KINDS:
        spec = yaml.safe_load((GITOPS / kind / "health_test.yaml").read_text())
        for case in spec["tests"]:
            out.append(pytest.param(kind, case, id=f"{kind}-{Path(case['inputPath']).stem}"))
    return out


@pytest.mark.parametrize(("kind", "case"), _cases())
def test_health_check(kind: str, case: dict[str, Any]) -> None:
    obj = yaml.safe_load((GITOPS / kind / case["inputPath"]).read_text())
    assert run_health(kind, obj) == case["healthStatus"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_testdata_file_is_a_case_and_a_valid_object(kind: str) -> None:
    spec_model, status_model = KINDS[kind]
    listed = {case["inputPath"] for case in yaml.safe_load((GITOPS / kind / "health_test.yaml").read_text())["tests"]}
    files = {f"testdata/{p.name}" for p in (GITOPS / kind / "testdata").glob("*.yaml")}
    assert listed == files
    for name in files:
        obj = yaml.safe_load((GITOPS / kind / name).read_text())
        assert obj["kind"] == kind and obj["apiVersion"] == "trawl.dev/v1alpha1"
        if not Path(name).stem.startswith("invalid"):  # invalid_* cases hold specs only the operator rejects
            spec_model.model_validate(obj["spec"])
        if "status" in obj:
            status_model.model_validate(obj["status"])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_argo_status_a_kind_needs_is_covered(kind: str) -> None:
    cases = yaml.safe_load((GITOPS / kind / "health_test.yaml").read_text())["tests"]
    seen = {case["healthStatus"]["status"] for case in cases}
    assert seen <= ARGO_STATUSES
    assert {"Healthy", "Progressing", "Degraded", "Suspended"} <= seen or (
        kind == "ScrapePool" and {"Healthy", "Progressing", "Degraded"} <= seen  # a pool cannot be suspended
    )


def test_argocd_cm_snippet_embeds_the_scripts_verbatim() -> None:
    """docs/gitops/argocd-cm.yaml is what users paste; it must carry the same scripts."""
    cm = yaml.safe_load((GITOPS.parent / "argocd-cm.yaml").read_text())
    for kind in KINDS:
        key = f"resource.customizations.health.trawl.dev_{kind}"
        assert cm["data"][key] == (GITOPS / kind / "health.lua").read_text(), f"{key}: run hack/gen_argocd_cm.py"


def _stats(**overrides: Any) -> JobStats:
    values: dict[str, Any] = {
        "total": 10,
        "pending": 8,
        "in_flight": 0,
        "retrying": 0,
        "succeeded": 2,
        "dead": 0,
        "enqueue_done": True,
        "suspended": False,
        "first_claim_at": 1.0,
    }
    return JobStats(**{**values, **overrides})


OPERATOR_CASES = {
    "pending": (JobFacts(generation=1, suspend=False), "Pending", "Progressing"),
    "queued": (
        JobFacts(generation=1, suspend=False, stats=_stats(pending=10, succeeded=0, first_claim_at=None)),
        "Queued",
        "Progressing",
    ),
    "running": (JobFacts(generation=1, suspend=False, stats=_stats()), "Running", "Progressing"),
    "succeeded": (JobFacts(generation=1, suspend=False, stats=_stats(pending=0, succeeded=10)), "Succeeded", "Healthy"),
    "succeeded-tolerated": (
        JobFacts(generation=1, suspend=False, max_dead_letters=2, stats=_stats(pending=0, succeeded=9, dead=1)),
        "Succeeded",
        "Healthy",
    ),
    "failed-dead-letters": (
        JobFacts(generation=1, suspend=False, stats=_stats(pending=0, succeeded=7, dead=3)),
        "Failed",
        "Degraded",
    ),
    "failed-deadline": (
        JobFacts(generation=1, suspend=False, deadline_exceeded=True, stats=_stats()),
        "Failed",
        "Degraded",
    ),
    "suspended": (JobFacts(generation=1, suspend=True, stats=_stats(suspended=True)), "Suspended", "Suspended"),
    "stalled": (
        JobFacts(generation=1, suspend=False, problem=Problem("PoolNotFound", 'ScrapePool "p" not found')),
        "Pending",
        "Degraded",
    ),
}


@pytest.mark.parametrize("case", sorted(OPERATOR_CASES))
def test_health_of_statuses_the_operator_derives(case: str) -> None:
    """The operator's own status derivation, fed through the health check."""
    facts, phase, health = OPERATOR_CASES[case]
    status, _ = derive_job_status(facts, None, datetime(2026, 1, 1, tzinfo=UTC))
    assert status["phase"] == phase
    metadata: dict[str, Any] = {"name": "x", "generation": 1}
    obj = {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": metadata,
        "spec": {"pool": "p", "urls": ["https://example.com/"], "suspend": facts.suspend},
        "status": status,
    }
    assert run_health("ScrapeJob", obj)["status"] == health
    # A spec edit the operator has not seen yet reads as in progress, whatever the old status said.
    metadata["generation"] = 2
    assert run_health("ScrapeJob", obj)["status"] == "Progressing"
