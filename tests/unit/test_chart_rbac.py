"""The operator's permissions have one source, trawl.operator.rbac; the kustomize base and the chart
carry exactly those rules (the chart's rendered rules are checked in test_chart.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

from trawl.operator.rbac import (
    CLUSTER_RULES,
    DEAD_LETTER_RETRIER_RULES,
    LEADER_ELECTION_RULES,
    NAMESPACED_RULES,
    RESULTS_READER_RULES,
)

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "manifests" / "rbac"


def _gen_rbac() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_rbac", ROOT / "hack" / "gen_rbac.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_rbac", module)
    spec.loader.exec_module(module)
    return module


def test_generated_rbac_files_are_up_to_date() -> None:
    stale = [str(path.relative_to(ROOT)) for path, text in _gen_rbac().outputs().items() if path.read_text() != text]
    assert not stale, f"{stale} drifted from operator/trawl/operator/rbac.py: run .venv/bin/python hack/gen_rbac.py"


def test_kustomize_cluster_role_equals_the_rule_list() -> None:
    role = yaml.safe_load((RBAC / "cluster_role.yaml").read_text())
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == [*NAMESPACED_RULES, *CLUSTER_RULES]
    binding = yaml.safe_load((RBAC / "cluster_role_binding.yaml").read_text())
    sa = yaml.safe_load((RBAC / "service_account.yaml").read_text())
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    ]


def test_chart_rule_file_equals_the_rule_list() -> None:
    rules = yaml.safe_load((ROOT / "charts" / "trawl" / "files" / "rbac-rules.yaml").read_text())
    assert rules == {
        "namespacedRules": NAMESPACED_RULES,
        "clusterRules": CLUSTER_RULES,
        "leaderElectionRules": LEADER_ELECTION_RULES,
        "resultsReaderRules": RESULTS_READER_RULES,
        "deadLetterRetrierRules": DEAD_LETTER_RETRIER_RULES,
    }


def test_the_results_api_user_roles_are_subresource_rules_only() -> None:
    """Binding a reader or retrier grants the results API's checks and nothing of the job itself."""
    roles = list(yaml.safe_load_all((RBAC / "results_api_roles.yaml").read_text()))
    assert [(r["metadata"]["name"], r["rules"]) for r in roles] == [
        ("trawl-results-reader", RESULTS_READER_RULES),
        ("trawl-dead-letter-retrier", DEAD_LETTER_RETRIER_RULES),
    ]
    for rule in [*RESULTS_READER_RULES, *DEAD_LETTER_RETRIER_RULES]:
        assert all("/" in resource for resource in rule["resources"]), rule


def test_no_wildcards_and_secrets_are_watched_only() -> None:
    for rule in [*NAMESPACED_RULES, *CLUSTER_RULES]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        if "secrets" in rule["resources"]:
            # Watched into an index (a rotation arrives as an event); never fetched one by one, never written.
            assert rule["verbs"] == ["list", "watch"], rule
    cluster_resources = {r for rule in CLUSTER_RULES for r in rule["resources"]}
    assert "secrets" not in cluster_resources
