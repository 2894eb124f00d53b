"""The floor under every pod the operator creates, whoever wrote its template (pure, no I/O).

The operator creates pods' owners with its own credentials: a pool's worker Deployment and the Jobs a
finished ScrapeJob runs from its pool's ``spec.onCompleteJobs``. Kubernetes then checks the *operator's*
rights, not those of the pool's author, so what the operator creates must never be more than any pool
author may run: not as the operator's own ServiceAccount (whose token reads every Secret the operator
watches and patches pods), and nothing that reaches through the container to the node — privileged
containers, privilege escalation, added capabilities, the host's network, PID or IPC namespace, hostPath
volumes, host ports, Windows host processes, an unmasked /proc, SELinux types that escape the container,
seccomp or AppArmor turned off (Unconfined). Beyond "never the operator's account" these follow the
baseline Pod Security Standard, stricter on capabilities (none may be added) and leaving sysctls to the
kubelet (which refuses unsafe ones it was not told to allow), plus the restricted one's
allowPrivilegeEscalation.

What a platform allows beyond that floor (images, ServiceAccounts, volume types) is its policy, in the
chart's ValidatingAdmissionPolicy; this floor holds wherever the operator runs, policy or not.

Templates are free-form (a JobTemplateSpec as the pool's author wrote it), so every read here is
defensive: a field of the wrong shape counts as absent (the API server refuses the object anyway).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

OPERATOR_SERVICE_ACCOUNT_ENV = "TRAWL_OPERATOR_SERVICE_ACCOUNT"
DEFAULT_OPERATOR_SERVICE_ACCOUNT = "trawl-operator"
# The container SELinux types the baseline Pod Security Standard allows; others (spc_t) escape the container.
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")


def operator_service_account() -> str:
    """The operator's ServiceAccount: the chart passes its pod's own (TRAWL_OPERATOR_SERVICE_ACCOUNT)."""
    return os.environ.get(OPERATOR_SERVICE_ACCOUNT_ENV) or DEFAULT_OPERATOR_SERVICE_ACCOUNT


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def job_template_pod(template: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec of a batch/v1 JobTemplateSpec (``spec.template.spec``), empty when there is none."""
    return _map(_map(_map(_map(template).get("spec")).get("template")).get("spec"))


def broken_rules(pod: Mapping[str, Any], operator_sa: str) -> list[str]:
    """Every rule of the floor the pod spec breaks, as "<field>: <why>"; empty when it stands on it."""
    broken: list[str] = []
    for field in ("serviceAccountName", "serviceAccount"):  # serviceAccount: the deprecated alias
        if pod.get(field) == operator_sa:
            broken.append(f"{field}: {operator_sa} is the operator's own ServiceAccount")
    broken += [f"{name}: the host's namespaces are not allowed" for name in HOST_NAMESPACES if pod.get(name)]
    for volume in _list(pod.get("volumes")):
        if _map(volume).get("hostPath") is not None:
            broken.append(f"volumes[{_map(volume).get('name')}].hostPath: hostPath volumes are not allowed")
    broken += [f"securityContext.{rule}" for rule in _context_rules(_map(pod.get("securityContext")))]
    for where, container in _containers(pod):
        context = _map(container.get("securityContext"))
        if context.get("privileged"):
            broken.append(f"{where}.securityContext.privileged: privileged containers are not allowed")
        if context.get("allowPrivilegeEscalation"):
            broken.append(f"{where}.securityContext.allowPrivilegeEscalation: privilege escalation is not allowed")
        if _list(_map(context.get("capabilities")).get("add")):
            broken.append(f"{where}.securityContext.capabilities.add: added capabilities are not allowed")
        if context.get("procMount") not in (None, "Default"):
            broken.append(f"{where}.securityContext.procMount: only the Default /proc mount is allowed")
        broken += [f"{where}.securityContext.{rule}" for rule in _context_rules(context)]
        if any(_map(port).get("hostPort") for port in _list(container.get("ports"))):
            broken.append(f"{where}.ports: host ports are not allowed")
    return broken


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for key in CONTAINER_LISTS:
        for i, container in enumerate(_list(pod.get(key))):
            container = _map(container)
            yield f"{key}[{container.get('name') or i}]", container


def _context_rules(context: Mapping[str, Any]) -> list[str]:
    """What a pod's or a container's securityContext breaks in both: Windows host processes, SELinux, and
    seccomp or AppArmor turned off."""
    broken = []
    if _map(context.get("windowsOptions")).get("hostProcess"):
        broken.append("windowsOptions.hostProcess: host processes are not allowed")
    for profile in ("seccompProfile", "appArmorProfile"):
        if _map(context.get(profile)).get("type") == "Unconfined":
            broken.append(f"{profile}.type: Unconfined is not allowed")
    selinux = _map(context.get("seLinuxOptions"))
    if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
        broken.append(f"seLinuxOptions: only the container types ({', '.join(SELINUX_TYPES[1:])}) are allowed")
    return broken


def refusal(what: str, rules: list[str]) -> str:
    """The message of a status that refuses a pod: what breaks which rules."""
    return f"{what} breaks the operator's pod floor: {'; '.join(rules)}"
