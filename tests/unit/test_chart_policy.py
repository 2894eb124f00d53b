"""The chart's workload policy (templates/workload-policy.yaml), rendered by a real helm: what it allows by
default and how its values widen it, where it is bound, and the one value it refuses. That it refuses and
admits the pools it should is checked on a real kube-apiserver (tests/cluster/test_workload_policy.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from helm_chart import HelmError, by_kind, one, render


def _variables(docs: list[dict[str, Any]]) -> dict[str, Any]:
    policy = one(docs, "ValidatingAdmissionPolicy")
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def test_default_allows_the_charts_own_images_and_the_default_account() -> None:
    docs = render()
    policy, binding = one(docs, "ValidatingAdmissionPolicy"), one(docs, "ValidatingAdmissionPolicyBinding")
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == "trawl-workloads"
    assert binding["spec"]["validationActions"] == ["Deny"] and "matchResources" not in binding["spec"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": ["trawl.dev"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["scrapepools"],
        }
    ]
    variables = _variables(docs)
    assert json.loads(variables["images"]) == ["ghcr.io/trawl-dev/trawl", "ghcr.io/trawl-dev/trawl-browser"]
    assert json.loads(variables["accounts"]) == ["default"]
    assert json.loads(variables["volumeTypes"]) == [
        "emptyDir",
        "persistentVolumeClaim",
        "configMap",
        "secret",
        "downwardAPI",
    ]
    assert json.loads(variables["csiDrivers"]) == []
    messages = [v["message"] for v in policy["spec"]["validations"]]
    assert any("toleration of every taint" in m for m in messages)
    assert any("reference Secrets" in m for m in messages)


def test_values_widen_it() -> None:
    values = {
        "image.repository": "registry.example.com/trawl",
        "workerImage": "registry.example.com:5000/team/worker@sha256:" + "a" * 64,
        "workloadPolicy.allowedImages": "{registry.example.com/data/,docker.io/library/busybox}",
        "workloadPolicy.allowedServiceAccounts": "{loader}",
        "workloadPolicy.allowedCSIDrivers": "{secrets-store.csi.k8s.io}",
        "workloadPolicy.allowTolerateAll": "true",
    }
    docs = render(set_values=values)
    variables = _variables(docs)
    assert json.loads(variables["images"]) == [
        "registry.example.com/trawl",
        "registry.example.com/trawl-browser",
        "registry.example.com/data/",
        "docker.io/library/busybox",
        "registry.example.com:5000/team/worker",
    ]
    assert json.loads(variables["accounts"]) == ["default", "loader"]
    assert json.loads(variables["csiDrivers"]) == ["secrets-store.csi.k8s.io"]
    messages = [v["message"] for v in one(docs, "ValidatingAdmissionPolicy")["spec"]["validations"]]
    assert not any("toleration of every taint" in m for m in messages)


def test_worker_image_tag_is_dropped_to_its_repository() -> None:
    variables = _variables(render(set_values={"workerImage": "registry.example.com:5000/worker:1.2"}))
    assert json.loads(variables["images"])[-1] == "registry.example.com:5000/worker"


def test_bound_to_the_watched_namespaces_only() -> None:
    docs = render("namespaced", namespace="team-a")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]


def test_disabled() -> None:
    docs = render(set_values={"workloadPolicy.enabled": "false"})
    assert by_kind(docs, "ValidatingAdmissionPolicy") == [] and by_kind(docs, "ValidatingAdmissionPolicyBinding") == []


def test_the_operators_own_account_is_refused() -> None:
    with pytest.raises(HelmError, match="lists trawl-operator, the operator's own ServiceAccount"):
        render(set_values={"workloadPolicy.allowedServiceAccounts": "{trawl-operator}"})
