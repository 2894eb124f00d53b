"""The pod floor (trawl.operator.podfloor): what no pod the operator creates may do, whoever wrote its
template, and where a template's pod is."""

from __future__ import annotations

from typing import Any

import pytest

from trawl.operator.podfloor import broken_rules, job_template_pod, operator_service_account, refusal

OK: dict[str, Any] = {
    "serviceAccountName": "loader",
    "securityContext": {"runAsNonRoot": True, "seLinuxOptions": {"type": "container_t"}},
    "containers": [
        {
            "name": "c",
            "image": "i",
            "ports": [{"containerPort": 8080}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
    "volumes": [{"name": "data", "emptyDir": {}}],
}


def test_an_ordinary_pod_stands_on_the_floor() -> None:
    assert broken_rules(OK, "trawl-operator") == []
    assert broken_rules({}, "trawl-operator") == []


def _with(pod: dict[str, Any] | None = None, **container: Any) -> dict[str, Any]:
    return {**OK, **(pod or {}), "containers": [{**OK["containers"][0], **container}]}


@pytest.mark.parametrize(
    ("pod", "rule"),
    [
        (_with({"serviceAccountName": "trawl-operator"}), "serviceAccountName: trawl-operator is the operator's own"),
        (_with({"serviceAccount": "trawl-operator"}), "serviceAccount: trawl-operator is the operator's own"),
        (_with({"hostNetwork": True}), "hostNetwork: the host's namespaces are not allowed"),
        (_with({"hostPID": True}), "hostPID: the host's namespaces are not allowed"),
        (_with({"hostIPC": True}), "hostIPC: the host's namespaces are not allowed"),
        (_with({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}), "volumes[root].hostPath"),
        (_with(securityContext={"privileged": True}), "containers[c].securityContext.privileged"),
        (_with(securityContext={"allowPrivilegeEscalation": True}), "containers[c].securityContext.allowPrivilege"),
        (_with(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}), "containers[c].securityContext.capab"),
        (_with(securityContext={"procMount": "Unmasked"}), "containers[c].securityContext.procMount"),
        (_with(ports=[{"containerPort": 80, "hostPort": 80}]), "containers[c].ports: host ports are not allowed"),
        (
            _with({"securityContext": {"windowsOptions": {"hostProcess": True}}}),
            "securityContext.windowsOptions.hostProcess",
        ),
        (_with({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}), "securityContext.seLinuxOptions"),
        (_with(securityContext={"seLinuxOptions": {"user": "system_u"}}), "containers[c].securityContext.seLinux"),
        (_with({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}), "securityContext.seccompProfile"),
        (_with(securityContext={"appArmorProfile": {"type": "Unconfined"}}), "containers[c].securityContext.appArmor"),
        (
            {**OK, "initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": True}}]},
            "initContainers[i].securityContext.privileged",
        ),
    ],
)
def test_each_rule(pod: dict[str, Any], rule: str) -> None:
    broken = broken_rules(pod, "trawl-operator")
    assert len(broken) == 1 and broken[0].startswith(rule), broken


def test_every_broken_rule_is_named_and_odd_shapes_do_not_raise() -> None:
    takeover = {
        "serviceAccountName": "ops",
        "hostPID": True,
        "containers": [{"name": "own", "securityContext": {"privileged": True}}],
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
    }
    broken = broken_rules(takeover, "ops")
    assert len(broken) == 4
    assert refusal("the worker pod", broken).startswith("the worker pod breaks the operator's pod floor: serviceAcc")
    odd = {"containers": "x", "volumes": [None, 3], "securityContext": [], "initContainers": [None]}
    assert broken_rules(odd, "ops") == []


def test_the_pod_of_a_job_template() -> None:
    pod = {"containers": [{"name": "c"}]}
    assert job_template_pod({"spec": {"template": {"spec": pod}}}) == pod
    assert job_template_pod({"spec": []}) == {} and job_template_pod({}) == {}


def test_the_operators_service_account_comes_from_the_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAWL_OPERATOR_SERVICE_ACCOUNT", raising=False)
    assert operator_service_account() == "trawl-operator"
    monkeypatch.setenv("TRAWL_OPERATOR_SERVICE_ACCOUNT", "team-trawl-operator")
    assert operator_service_account() == "team-trawl-operator"


def test_the_worker_pod_and_a_pools_job_templates_are_checked() -> None:
    from trawl.api.scrapepool import ScrapePoolSpec
    from trawl.operator.pool.deployment import worker_deployment
    from trawl.operator.pool.reconcile import templates_problem

    def pod(**worker: Any) -> Any:
        spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}, "worker": worker})
        return worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=spec, replicas=1)["spec"]["template"][
            "spec"
        ]

    assert broken_rules(pod(), "trawl-operator") == []  # what the operator renders itself stands on it
    assert broken_rules(pod(serviceAccountName="trawl-operator"), "trawl-operator") == [
        "serviceAccountName: trawl-operator is the operator's own ServiceAccount"
    ]
    hostile = {"windowsOptions": {"hostProcess": True}}
    assert broken_rules(pod(podSecurityContext=hostile), "trawl-operator") == [
        "securityContext.windowsOptions.hostProcess: host processes are not allowed"
    ]
    template = {
        "spec": {"template": {"spec": {"containers": [{"name": "c", "securityContext": {"privileged": True}}]}}}
    }
    spec = ScrapePoolSpec.model_validate(
        {"redis": {"url": "redis://r:6379/0"}, "onCompleteJobs": [{"name": "load", "template": template}]}
    )
    problem = templates_problem(spec, "trawl-operator")
    assert problem is not None and problem.reason == "PodNotAllowed"
    assert problem.message == (
        "spec.onCompleteJobs[load] breaks the operator's pod floor: "
        "containers[c].securityContext.privileged: privileged containers are not allowed"
    )
