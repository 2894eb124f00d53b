"""The Grafana dashboard in charts/trawl/dashboards: well-formed, and built only on series Trawl exports.

(tests/cluster/test_metrics.py checks the same names against live /metrics endpoints.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts/trawl/dashboards/trawl-dashboard.json"
METRIC = re.compile(r"\btrawl_[a-z0-9_]+")


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def dashboard_metrics(dashboard: dict[str, Any]) -> set[str]:
    names = {m for e in exprs(dashboard) for m in METRIC.findall(e)}
    for var in dashboard["templating"]["list"]:
        if var.get("type") == "query":
            names |= set(METRIC.findall(var["definition"]))
    return names


def sample_names(registry: CollectorRegistry) -> set[str]:
    """The series names a registry exposes: counters as _total, histograms as _bucket/_count/_sum."""
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_count", "_sum")}
        else:
            names.add(family.name)
    return names


def exported_names() -> set[str]:
    from prometheus_client import REGISTRY

    import trawl.operator.metrics  # noqa: F401  (registers the operator's metrics)
    from trawl.worker.metrics import WorkerMetrics

    return sample_names(REGISTRY) | sample_names(WorkerMetrics().registry)


def test_dashboard_is_valid_grafana_json() -> None:
    d = load()
    assert d["uid"] == "trawl-overview" and d["title"] == "Trawl"
    assert d["schemaVersion"] >= 36
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert "namespace" in variables
    for panel in d["panels"]:
        assert panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in load()["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize("expr", exprs(load()))
def test_queries_are_well_formed(expr: str) -> None:
    for open_, close in ("()", "{}", "[]"):
        depth = 0
        for ch in expr:
            depth += (ch == open_) - (ch == close)
            assert depth >= 0, expr
        assert depth == 0, expr
    for fn in ("rate(", "increase("):
        for part in expr.split(fn)[1:]:
            assert re.match(r"[a-z_]+(\{[^}]*\})?\[[^\]]+\]\)", part), (fn, expr)
    if "histogram_quantile" in expr:
        assert "_bucket" in expr and re.search(r"by \((le|le, [a-z, ]+)\)", expr), expr


def test_every_queried_series_is_exported() -> None:
    used = dashboard_metrics(load())
    missing = used - exported_names()
    assert not missing, f"the dashboard queries series Trawl does not export: {sorted(missing)}"


def test_dashboard_covers_the_operator_and_worker_series() -> None:
    used = dashboard_metrics(load())
    for name in (
        "trawl_operator_jobs",
        "trawl_operator_reconcile_seconds_bucket",
        "trawl_operator_status_patches_total",
        "trawl_operator_scaling_decisions_total",
        "trawl_operator_redis_errors_total",
        "trawl_worker_fetches_total",
        "trawl_worker_fetch_seconds_bucket",
        "trawl_worker_response_bytes_total",
        "trawl_worker_in_flight",
        "trawl_worker_rate_limit_deferrals_total",
        "trawl_pool_backlog_tasks",
        "trawl_pool_delayed_tasks",
        "trawl_pool_in_flight_tasks",
        "trawl_pool_dead_letters",
        "trawl_pool_desired_replicas",
        "trawl_pool_ready_replicas",
        "trawl_pool_backlog_stalled_seconds",
        "trawl_job_tasks",
    ):
        assert name in used, name


def test_dashboard_configmap_template(tmp_path: Path) -> None:
    """Off by default; when enabled, a ConfigMap for Grafana's sidecar holding exactly the dashboard file.

    Rendered from a copy of the chart without values.schema.json until the schema declares
    metrics.grafanaDashboard (the chart's schema forbids unknown values)."""
    import shutil
    import subprocess

    import yaml

    from helm_chart import CHART, helm_binary

    helm = helm_binary()
    default = subprocess.run([helm, "template", "t", str(CHART)], capture_output=True, text=True, check=True)
    assert "trawl-dashboard.json" not in default.stdout
    chart = tmp_path / "trawl"
    shutil.copytree(CHART, chart)
    (chart / "values.schema.json").unlink(missing_ok=True)
    args = ["--set", "metrics.grafanaDashboard.enabled=true", "--set", "metrics.grafanaDashboard.namespace=grafana"]
    out = subprocess.run(
        [helm, "template", "t", str(chart), *args, "-s", "templates/dashboard-configmap.yaml"],
        capture_output=True,
        text=True,
        check=True,
    )
    cm = yaml.safe_load(out.stdout)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["trawl-dashboard.json"]) == load()
