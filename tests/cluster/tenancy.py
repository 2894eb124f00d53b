"""A tenant: the least-trusted user of a shared Trawl, who may write ScrapeJobs and CronScrapeJobs in one
namespace and nothing else (no Jobs, Pods, Secrets, ScrapePools). Issue 32's findings are reproduced as
this user: whatever a test then sees happen was caused by a spec such a user could write.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trawl.dev.controlplane import ControlPlane

TENANT = "tenant"

# What a platform team grants the teams that use Trawl: the two kinds a job author writes, and reading
# the pools they run on and the Events about their objects.
TENANT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["trawl.dev"],
        "resources": ["scrapejobs", "cronscrapejobs"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": ["trawl.dev"], "resources": ["scrapepools"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]


@dataclass(frozen=True)
class Tenant:
    """The tenant's identity in one namespace: kubectl as ``system:serviceaccount:<namespace>:tenant``."""

    control_plane: ControlPlane
    namespace: str
    kubeconfig: Path

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.control_plane.kubectl(
            *args, "-n", self.namespace, check=check, input=input, kubeconfig=self.kubeconfig
        )

    def apply(self, *objs: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        """``kubectl apply`` the objects as the tenant (the API server's answer in the result)."""
        items = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        return self.kubectl("apply", "-f", "-", input=items, check=check)

    def can(self, verb: str, resource: str) -> bool:
        out = self.kubectl("auth", "can-i", verb, resource, check=False)
        return out.stdout.strip() == "yes"


def make_tenant(control_plane: ControlPlane, namespace: str) -> Tenant:
    """The tenant ServiceAccount, its Role and RoleBinding in ``namespace``, and a kubeconfig with its token."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": TENANT, "namespace": namespace},
        "rules": TENANT_RULES,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": TENANT, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT},
        "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": namespace}],
    }
    control_plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding]})
    )
    tenant = Tenant(control_plane, namespace, control_plane.service_account_kubeconfig(namespace, TENANT))
    # The premise of every tenant test: this user may write ScrapeJobs but cannot make workloads or read Secrets.
    assert tenant.can("create", "scrapejobs.trawl.dev")
    assert not tenant.can("create", "jobs.batch") and not tenant.can("create", "pods")
    assert not tenant.can("list", "secrets") and not tenant.can("create", "scrapepools.trawl.dev")
    return tenant
