"""The permissions the operator uses, and nothing more.

This list is the source of ``manifests/rbac`` and of the Helm chart's ClusterRole/Role; a test
checks the three agree, and the cluster tests run the operator impersonating its ServiceAccount
so a missing permission fails a test instead of a production rollout.
"""

from __future__ import annotations

from typing import Any

# Rules the operator needs in every namespace it watches.
NAMESPACED_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["trawl.dev"],
        "resources": ["scrapejobs", "scrapepools", "cronscrapejobs"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["trawl.dev"],
        "resources": ["scrapejobs/status", "scrapepools/status", "cronscrapejobs/status"],
        "verbs": ["get", "update", "patch"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "update", "patch"]},
    # Pods: read readiness and set controller.kubernetes.io/pod-deletion-cost on idle workers.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    # Secrets: watched into an index (the pools' Redis Secrets, the worker Secrets a pool mounts), so a
    # rotation arrives with its event; never read one by one (no get), never written.
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]},
    # Events: get to update the one aggregated Event per job and reason (count, message) in place; list for
    # the web console's job page (shown only to viewers RBAC lets list Events there).
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "create", "patch"]},
    # spec.onComplete.job: create the Job (from the pool's template) once, then follow it until it finishes.
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "create"]},
]

# Cluster-scoped reads kopf needs to run: CRD discovery for its resource scan, and namespaces when it
# watches all of them; namespaces also for their labels (an index), which name a job's tenant on a pool
# whose spec.tenancy sets tenantLabel.
CLUSTER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    # The results API (trawl.resultsapi): who a caller's token belongs to, and whether RBAC lets them read
    # a job's results or retry its dead letters. Creating a review grants nothing; it only asks.
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]

# Leader election: the replicas' one Lease, in the operator's own namespace only (a Role there).
LEADER_ELECTION_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]},
]

# What the results API (trawl.resultsapi) asks RBAC about: subresources of scrapejobs that exist for RBAC only,
# in trawl.dev (Trawl's own check, every request) and results.trawl.dev (the API server's check when the API is
# reached as an aggregated API, /apis/results.trawl.dev/...). The chart and manifests/rbac ship them as two
# ClusterRoles that grant nothing until a platform team binds them (a RoleBinding per team namespace).
_API_GROUPS = ["trawl.dev", "results.trawl.dev"]
# A URL's history (…/history) needs both subresources in Trawl's check; through the API server, the path is
# scrapejobs/history of results.trawl.dev, which the API server checks before it forwards.
_HISTORY = {"apiGroups": ["results.trawl.dev"], "resources": ["scrapejobs/history"], "verbs": ["get"]}
RESULTS_READER_RULES: list[dict[str, Any]] = [
    {"apiGroups": list(_API_GROUPS), "resources": ["scrapejobs/results", "scrapejobs/deadletters"], "verbs": ["get"]},
    dict(_HISTORY),
]
DEAD_LETTER_RETRIER_RULES: list[dict[str, Any]] = [
    {"apiGroups": list(_API_GROUPS), "resources": ["scrapejobs/results", "scrapejobs/deadletters"], "verbs": ["get"]},
    dict(_HISTORY),
    {"apiGroups": list(_API_GROUPS), "resources": ["scrapejobs/deadletters"], "verbs": ["update"]},
]

# Serving the results API as an aggregated API: the operator reads the API server's front-proxy CA from
# kube-system/extension-apiserver-authentication through this built-in Role (bound, never written here).
AGGREGATED_API_READER_ROLE = ("kube-system", "extension-apiserver-authentication-reader")
