"""The Helm chart, rendered by a real helm: lint, RBAC equal to the operator's rule list, CRDs equal to
the generated ones, restricted pods, and the value combinations it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_chart import (
    CHART,
    CI_VALUES,
    VALUE_SETS,
    HelmError,
    by_kind,
    helm,
    hook_objects,
    is_hook,
    one,
    operator_deployment,
    operator_rbac_objects,
    render,
    service_account_name,
)
from trawl.api.crd import all_crds
from trawl.operator.rbac import (
    AGGREGATED_API_READER_ROLE,
    CLUSTER_RULES,
    DEAD_LETTER_RETRIER_RULES,
    LEADER_ELECTION_RULES,
    NAMESPACED_RULES,
    RESULTS_READER_RULES,
)

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCOPED = {
    "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "APIService",
}  # fmt: skip


def _rules(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["rules"])


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_helm_lint_strict(value_set: str) -> None:
    args = ["lint", "--strict", str(CHART)]
    for name in VALUE_SETS[value_set]:
        args += ["-f", str(CI_VALUES / name)]
    out = helm(*args)
    assert "0 chart(s) failed" in out.stdout, out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def test_every_ci_values_file_is_a_value_set() -> None:
    listed = {name for files in VALUE_SETS.values() for name in files}
    assert listed == {p.name for p in CI_VALUES.glob("*.yaml")}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_renders_and_every_object_is_labelled(value_set: str) -> None:
    docs = render(value_set, namespace="team-a")
    assert docs
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "trawl", doc["metadata"]
        assert labels.get("app.kubernetes.io/instance") == "trawl", doc["metadata"]
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace"), f"{doc['kind']} {doc['metadata']['name']} has no namespace"


def _installed(value_set: str | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """The release's own objects, without its hooks (the pre-delete Job has RBAC of its own)."""
    return [d for d in render(value_set, **kwargs) if not is_hook(d)]


def test_cluster_wide_rbac_equals_the_operator_rule_list() -> None:
    docs = _installed()
    role = one(operator_rbac_objects(docs), "ClusterRole")
    assert _rules(role) == [*NAMESPACED_RULES, *CLUSTER_RULES]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": service_account_name(docs), "namespace": "trawl-system"}
    ]
    # Namespaced objects only for the leader-election Lease, in the operator's own namespace.
    assert [(r["metadata"]["namespace"], _rules(r)) for r in by_kind(docs, "Role")] == [
        ("trawl-system", LEADER_ELECTION_RULES)
    ]
    assert [b["roleRef"]["name"] for b in by_kind(docs, "RoleBinding")] == ["trawl-operator-leader-election"]
    args = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)


def test_namespaced_rbac_is_a_role_per_watched_namespace() -> None:
    docs = _installed("namespaced")
    leader = "trawl-operator-leader-election"
    roles = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] != leader]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert _rules(role) == NAMESPACED_RULES
    bindings = [b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"] != leader]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    sa = service_account_name(docs)
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "trawl-system"}]
    # Cluster-wide, only what kopf needs: no Secret, pod or Deployment access outside the watched namespaces.
    cluster_role = one(operator_rbac_objects(docs), "ClusterRole")
    assert _rules(cluster_role) == CLUSTER_RULES
    assert one(docs, "ClusterRoleBinding")["roleRef"]["name"] == cluster_role["metadata"]["name"]
    args = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args


def test_rbac_create_false_renders_no_rbac() -> None:
    docs = render("minimal")  # hooks included: without rbac.create the pre-delete hook makes none either
    assert not [d for d in docs if d["kind"] in {"ServiceAccount", "ClusterRole", "Role", "RoleBinding"}]
    assert service_account_name(docs) == "trawl-operator"


def test_operator_rbac_objects_are_ordered_for_apply() -> None:
    kinds = [d["kind"] for d in operator_rbac_objects(render("namespaced"))]
    assert kinds == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
    ]


def test_chart_crds_equal_the_generated_ones() -> None:
    generated = all_crds()
    committed = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert committed == generated, "charts/trawl/crds drifted from the models: run `trawl crd`"
    # And helm ships exactly those: --include-crds renders the same objects.
    rendered = [d for d in render(include_crds=True) if d["kind"] == "CustomResourceDefinition"]
    expected = [yaml.safe_load(text) for text in generated.values()]
    key = lambda d: d["metadata"]["name"]  # noqa: E731
    assert sorted(rendered, key=key) == sorted(expected, key=key)


def _restricted(pod_spec: dict[str, Any]) -> None:
    psc = pod_spec["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert psc.get("runAsUser", 1) != 0
    for container in [*pod_spec["containers"], *pod_spec.get("initContainers", [])]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False, container["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert sc["readOnlyRootFilesystem"] is True, container["name"]
        assert sc["runAsNonRoot"] is True, container["name"]
        assert "resources" in container, container["name"]
    assert not pod_spec.get("hostNetwork") and not pod_spec.get("hostPID") and not pod_spec.get("hostIPC")


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_pods_are_restricted(value_set: str) -> None:
    docs = render(value_set, namespace="team-a")
    workloads = by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet") + by_kind(docs, "Job")
    assert workloads
    for workload in workloads:
        _restricted(workload["spec"]["template"]["spec"])


def test_pre_delete_hook_deletes_the_default_pool_with_its_own_minimal_rbac() -> None:
    """`helm uninstall` runs the hook before deleting anything, while the operator still removes the
    pool's finalizer: the chart's own image runs `trawl pool delete`, bounded, with rights for that only."""
    docs = render(namespace="team-a")
    hooks = hook_objects(docs, "pre-delete")
    assert {(d["kind"], d["metadata"]["annotations"]["helm.sh/hook"]) for d in hooks} == {
        (kind, "pre-delete") for kind in ("ServiceAccount", "Role", "RoleBinding", "Job")
    }
    weight = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks}
    assert weight["ServiceAccount"] < weight["RoleBinding"] < weight["Job"] and weight["Role"] < weight["Job"]
    job = one(hooks, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook-output-log-policy"] == "hook-failed"  # helm prints why it failed
    assert "hook-failed" in annotations["helm.sh/hook-delete-policy"]  # nothing left behind either way
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 120
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    operator = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == operator["image"], "no other image than the chart's own"
    assert container["command"] == ["trawl"]
    assert container["args"] == ["pool", "delete", "default", "--namespace=team-a", "--timeout=120"]
    sa = one(hooks, "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] == sa != service_account_name(docs)
    assert _rules(one(hooks, "Role")) == [
        {"apiGroups": ["trawl.dev"], "resources": ["scrapepools"], "verbs": ["get", "delete"]},
        {"apiGroups": ["trawl.dev"], "resources": ["scrapejobs"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    ]
    binding = one(hooks, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "team-a"}]
    assert binding["roleRef"]["name"] == one(hooks, "Role")["metadata"]["name"]
    # No default pool, nothing to delete: no hook.
    assert not hook_objects(render("no-redis"), "pre-delete")
    # rbac.create=false: only the Job, as the operator's ServiceAccount.
    minimal = render("minimal")
    (job,) = hook_objects(minimal, "pre-delete")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == service_account_name(minimal)


def test_operator_deployment_shape() -> None:
    deployment = operator_deployment(render("metrics"))
    spec = deployment["spec"]
    # Two replicas electing a leader: a rolling update surges a standby before stopping one.
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["trawl"] and container["args"][0] == "operator"
    assert "--leader-election" in container["args"]
    assert "--metrics-port=9100" in container["args"] and "--health-port=8081" in container["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8081, "metrics": 9100, "api": 8443}
    assert container["image"].startswith("ghcr.io/trawl-dev/trawl@sha256:")
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_operator_high_availability_objects() -> None:
    docs = render()
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == "trawl-operator"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == operator_deployment(docs)["spec"]["selector"]["matchLabels"]
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "trawl-operator-leader-election"]
    assert role["metadata"]["namespace"] == "trawl-system"
    assert role["rules"] == LEADER_ELECTION_RULES
    single = render(set_values={"operator.replicas": "1", "operator.leaderElection.enabled": "false"})
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget" and "operator" in d["metadata"]["name"]]
    assert "--leader-election" not in operator_deployment(single)["spec"]["template"]["spec"]["containers"][0]["args"]


def test_default_image_is_the_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    container = operator_deployment(render())["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/trawl-dev/trawl:{chart['appVersion']}"
    from trawl.api.scrapepool import DEFAULT_WORKER_IMAGE

    assert container["image"] == DEFAULT_WORKER_IMAGE, "the operator's default worker image must match the chart"


def test_bundled_redis_has_persistence_aof_and_its_password_from_the_secret() -> None:
    docs = render()
    assert not by_kind(docs, "Secret")  # made in the cluster by the hook below, never rendered
    sts = one(docs, "StatefulSet")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    command = " ".join(container["args"])
    assert "--appendonly yes" in command and '--requirepass "$REDIS_PASSWORD"' in command
    env = {e["name"]: e for e in container["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "trawl-redis", "key": "password"}
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    pool = one(docs, "ScrapePool")
    assert pool["spec"]["redis"] == {"urlSecretRef": {"name": "trawl-redis", "key": "url"}}


def test_the_redis_password_is_made_in_the_cluster_by_a_hook_with_its_own_minimal_rbac() -> None:
    """No render holds a password: a pre-install/pre-upgrade Job (the chart's own image) runs `trawl secret
    ensure`, which creates the Secret once and keeps it, with rights on that Secret only (and create)."""
    docs = render(namespace="team-a")
    hooks = hook_objects(docs, "pre-install")
    assert {(d["kind"], d["metadata"]["annotations"]["helm.sh/hook"]) for d in hooks} == {
        (kind, "pre-install,pre-upgrade") for kind in ("ServiceAccount", "Role", "RoleBinding", "Job")
    }
    weight = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks}
    assert weight["ServiceAccount"] < weight["RoleBinding"] < weight["Job"] and weight["Role"] < weight["Job"]
    job = one(hooks, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook-output-log-policy"] == "hook-failed"
    assert job["spec"]["activeDeadlineSeconds"] <= 300  # helm's default wait for a hook
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    operator = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == operator["image"], "no other image than the chart's own"
    assert container["command"] == ["trawl"]
    assert container["args"] == [
        "secret", "ensure", "trawl-redis", "--namespace=team-a", "--random=password",
        "--derived=url=redis://:{password}@trawl-redis.team-a.svc:6379/0",
        "--label=trawl.dev/secret=true", "--label=app.kubernetes.io/name=trawl",
        "--label=app.kubernetes.io/component=redis", "--label=app.kubernetes.io/part-of=trawl",
    ]  # fmt: skip
    # Not the release's instance label: Argo CD would count the Secret in the Application and prune it.
    assert not any("app.kubernetes.io/instance" in arg for arg in container["args"])
    sa = one(hooks, "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] == sa != service_account_name(docs)
    assert _rules(one(hooks, "Role")) == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["trawl-redis"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    binding = one(hooks, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "team-a"}]
    # A password of the user's (given, or their own Secret), or no bundled Redis: no hook.
    for values in (
        {"redis.bundled.password": "s3cret"},
        {"redis.bundled.existingSecret": "mine"},
        {"redis.bundled.enabled": "false", "defaultPool.enabled": "false"},
    ):
        assert not hook_objects(render(set_values=values), "pre-install"), values


def test_a_given_redis_password_is_rendered_into_a_labelled_secret() -> None:
    first, second = (one(render(set_values={"redis.bundled.password": "s3cret"}), "Secret") for _ in range(2))
    assert first == second
    assert first["stringData"] == {"password": "s3cret", "url": "redis://:s3cret@trawl-redis.trawl-system.svc:6379/0"}
    assert first["metadata"]["labels"]["trawl.dev/secret"] == "true"  # the operator reads only labelled Secrets


def test_external_redis_pool() -> None:
    pool = one(render("external-redis"), "ScrapePool")
    assert pool["spec"]["redis"] == {
        "url": "rediss://redis.example.internal:6380/0",
        "passwordSecretRef": {"name": "trawl-redis-password", "key": "password"},
        "tls": {"enabled": True},
    }
    pool = one(render("external-redis-secret"), "ScrapePool")
    assert pool["spec"]["redis"] == {"urlSecretRef": {"name": "trawl-redis-url", "key": "url"}}


def _redis_egress(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The worker NetworkPolicy's rule to the external Redis CIDRs."""
    policy = one(docs, "NetworkPolicy", "trawl-workers")
    (rule,) = [
        r
        for r in policy["spec"]["egress"]
        if all("ipBlock" in peer for peer in r["to"]) and all(p["ipBlock"]["cidr"] != "0.0.0.0/0" for p in r["to"])
    ]
    return rule


def test_external_redis_sentinel_pool() -> None:
    docs = render("external-redis-sentinel")
    assert one(docs, "ScrapePool")["spec"]["redis"] == {
        "mode": "Sentinel",
        "sentinels": [
            "sentinel-0.redis.example.internal:26379",
            "sentinel-1.redis.example.internal:26379",
            "10.20.0.12:26379",
        ],
        "masterName": "trawl",
        "passwordSecretRef": {"name": "trawl-redis-password", "key": "password"},
        "sentinelPasswordSecretRef": {"name": "trawl-redis-sentinel-password", "key": "password"},
    }
    # The master's port and the Sentinels' to the external CIDRs, nothing else.
    rule = _redis_egress(docs)
    assert rule["to"] == [{"ipBlock": {"cidr": "10.20.0.0/24"}}]
    assert rule["ports"] == [{"port": 6379, "protocol": "TCP"}, {"port": 26379, "protocol": "TCP"}]
    # TLS reaches the Sentinels and the master alike (one flag in the API); no password: no refs.
    plain = one(
        render(
            "external-redis-sentinel",
            set_values={"redis.external.tls": "true", "redis.external.passwordSecret.name": ""},
        ),
        "ScrapePool",
    )["spec"]["redis"]
    assert plain["tls"] == {"enabled": True} and "passwordSecretRef" not in plain and "url" not in plain


def test_external_redis_cluster_pool() -> None:
    docs = render("external-redis-cluster")
    assert one(docs, "ScrapePool")["spec"]["redis"] == {
        "mode": "Cluster",
        "url": "redis://redis-cluster.example.internal:7000/0",
        "passwordSecretRef": {"name": "trawl-redis-password", "key": "password"},
        "shards": 3,
    }
    rule = _redis_egress(docs)
    assert rule["to"] == [{"ipBlock": {"cidr": "10.30.0.0/24"}}]
    assert [p["port"] for p in rule["ports"]] == [7000, 7001, 7002]
    # The whole URL from a Secret works in Cluster mode too.
    secret = one(
        render(
            "external-redis-cluster",
            set_values={"redis.external.url": "", "redis.external.urlSecret.name": "trawl-redis-url"},
        ),
        "ScrapePool",
    )["spec"]["redis"]
    assert secret["mode"] == "Cluster" and secret["urlSecretRef"] == {"name": "trawl-redis-url", "key": "url"}


def test_default_pool_key_prefix_and_shards_are_values() -> None:
    from trawl.api.scrapepool import ScrapePoolSpec

    default = one(render(), "ScrapePool")["spec"]["redis"]
    assert "shards" not in default and "keyPrefix" not in default  # the model's defaults
    spec = one(
        render(set_values={"defaultPool.redis.keyPrefix": "trawl:team-a", "defaultPool.redis.shards": "2"}),
        "ScrapePool",
    )["spec"]
    assert spec["redis"]["keyPrefix"] == "trawl:team-a" and spec["redis"]["shards"] == 2
    assert ScrapePoolSpec.model_validate(spec).redis.key_prefix == "trawl:team-a"
    with pytest.raises(HelmError, match="keyPrefix"):
        render(set_values={"defaultPool.redis.keyPrefix": "has space"})


def test_default_pool_job_limits_are_values() -> None:
    """Issue 32: the platform team sets what each job of the default pool may ask for at most."""
    from trawl.api.scrapepool import ScrapePoolSpec

    assert "jobLimits" not in one(render(), "ScrapePool")["spec"]  # the pool's safe defaults
    spec = one(
        render(set_values={"defaultPool.jobLimits.requestsPerSecond": "5", "defaultPool.jobLimits.maxPriority": "7"}),
        "ScrapePool",
    )["spec"]
    assert spec["jobLimits"] == {"requestsPerSecond": 5, "maxPriority": 7}
    ceilings = ScrapePoolSpec.model_validate(spec).ceilings()
    assert (ceilings.requests_per_second, ceilings.max_priority) == (5, 7)
    with pytest.raises(HelmError, match="maxPriority"):
        render(set_values={"defaultPool.jobLimits.maxPriority": "10"})


def test_default_pool_tenancy_is_a_value() -> None:
    """Issue 33: the platform team sets who shares the default pool, and how."""
    from trawl.api.scrapepool import ScrapePoolSpec

    assert "tenancy" not in one(render(), "ScrapePool")["spec"]
    values = {
        "defaultPool.tenancy.priorityClasses[0].name": "normal",
        "defaultPool.tenancy.priorityClasses[0].value": "5",
        "defaultPool.tenancy.tenants[0].name": "team-a",
        "defaultPool.tenancy.tenants[0].weight": "3",
        "defaultPool.tenancy.tenants[0].priorityCeiling": "normal",
        "defaultPool.tenancy.tenants[0].quotas.inFlight": "20",
    }
    spec = one(render(set_values=values), "ScrapePool")["spec"]
    tenancy = ScrapePoolSpec.model_validate(spec).tenancy
    assert tenancy is not None and tenancy.tenants is not None
    assert (tenancy.tenants[0].weight, tenancy.tenants[0].quotas.in_flight) == (3, 20)  # type: ignore[union-attr]


def test_external_redis_without_cidrs_is_reachable_outside_the_denied_ranges() -> None:
    """Without cidrs the external Redis's ports are open to any address the web rule allows, not only 80/443."""
    docs = render("external-redis-secret")  # no cidrs
    policy = one(docs, "NetworkPolicy", "trawl-workers")
    rules = [r for r in policy["spec"]["egress"] if any("ipBlock" in peer for peer in r["to"])]
    assert sorted(sorted(p["port"] for p in r["ports"]) for r in rules) == [[80, 443], [6379]]
    redis_rule = next(r for r in rules if [p["port"] for p in r["ports"]] == [6379])
    v4 = next(p["ipBlock"] for p in redis_rule["to"] if p["ipBlock"]["cidr"] == "0.0.0.0/0")
    assert "10.0.0.0/8" in v4["except"] and "169.254.0.0/16" in v4["except"]
    # no Redis at all: no rule for one
    none = one(render("no-redis"), "NetworkPolicy", "trawl-workers")
    assert not [r for r in none["spec"]["egress"] if any(p.get("port") == 6379 for p in r.get("ports", []))]


def test_external_redis_port_listed_once() -> None:
    """extraPorts may repeat port; the policy lists each port once. Standalone renders no mode."""
    docs = render("external-redis", set_values={"redis.external.extraPorts": "{6380,6381}"})
    assert [p["port"] for p in _redis_egress(docs)["ports"]] == [6380, 6381]
    assert "mode" not in one(docs, "ScrapePool")["spec"]["redis"]


def test_default_pool_validates_against_the_model() -> None:
    from trawl.api.scrapepool import ScrapePoolSpec

    external = ("external-redis", "external-redis-secret", "external-redis-sentinel", "external-redis-cluster")
    for value_set in ("default", *external, "metrics"):
        pool = one(render(value_set), "ScrapePool")
        ScrapePoolSpec.model_validate(pool["spec"])


def test_worker_selectors_match_the_operator_labels() -> None:
    from trawl.api.naming import pool_selector

    docs = render("metrics")
    worker_labels = pool_selector("default")
    pdb = one(docs, "PodDisruptionBudget", "trawl-default-workers")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= worker_labels.items()
    for policy in by_kind(docs, "NetworkPolicy"):
        if policy["metadata"]["labels"]["app.kubernetes.io/component"] == "worker":
            assert policy["spec"]["podSelector"]["matchLabels"].items() <= worker_labels.items()
    monitor = one(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= worker_labels.items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def test_worker_network_policy_denies_internal_ranges() -> None:
    docs = render()
    policy = one(docs, "NetworkPolicy", "trawl-workers")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    web = [rule for rule in policy["spec"]["egress"] if any("ipBlock" in peer for peer in rule["to"])]
    (rule,) = web
    v4 = next(p["ipBlock"] for p in rule["to"] if p["ipBlock"]["cidr"] == "0.0.0.0/0")
    for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10"):
        assert cidr in v4["except"]
    assert {p["port"] for p in rule["ports"]} == {80, 443}
    redis_policy = one(docs, "NetworkPolicy", "trawl-redis")
    assert redis_policy["spec"]["policyTypes"] == ["Ingress"]


def test_namespaced_network_policies_follow_watched_namespaces() -> None:
    docs = render("namespaced")
    workers = [p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"] == "trawl-workers"]
    assert sorted(p["metadata"]["namespace"] for p in workers) == ["team-a", "team-b"]


def test_no_redis_renders_no_pool_and_no_redis() -> None:
    docs = render("no-redis")
    assert not by_kind(docs, "StatefulSet") and not by_kind(docs, "ScrapePool") and not by_kind(docs, "Secret")


def test_service_monitor() -> None:
    docs = render("metrics")
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service", "trawl-operator-metrics")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["spec"]["selector"].items() or (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"


@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        ({"redis.bundled.enabled": "false"}, "defaultPool needs a Redis"),
        ({"redis.external.url": "redis://r:6379"}, "disable redis.bundled.enabled"),
        ({"watchNamespaces[0]": "elsewhere"}, "which watchNamespaces does not list"),
        ({"image.pullPolicy": "Sometimes"}, "pullPolicy"),
        ({"nosuchvalue": "1"}, "nosuchvalue"),
        ({"redis.external.url": "redis://user:pw@r:6379", "redis.bundled.enabled": "false"}, "url"),
        ({"serviceAccount.create": "false"}, "serviceAccount.name is required"),
        ({"redis.external.mode": "Replicated"}, "mode"),
        ({"redis.external.sentinels[0]": "no-port"}, "sentinels"),
        ({"redis.external.mode": "Cluster"}, "disable redis.bundled.enabled"),
    ],
)
def test_refuses_values_that_cannot_work(set_values: dict[str, str], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        render(set_values=set_values)


@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        ({"redis.external.sentinels": "null"}, "Sentinel needs both redis.external.sentinels"),
        ({"redis.external.masterName": ""}, "Sentinel needs both redis.external.sentinels"),
        ({"redis.external.url": "redis://r:6379"}, "Sentinel takes sentinels and masterName, not url"),
        ({"redis.external.urlSecret.name": "url"}, "Sentinel takes sentinels and masterName, not url"),
        ({"redis.external.mode": "Standalone"}, "apply to mode Sentinel only"),
        ({"redis.external.mode": "Cluster", "redis.external.url": "redis://r:7000"}, "mode Sentinel only"),
    ],
)
def test_refuses_sentinel_values_that_cannot_work(set_values: dict[str, str], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        render("external-redis-sentinel", set_values=set_values)


def test_values_schema_covers_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if isinstance(value, dict) and node.get("additionalProperties") is False:
            for key, sub in value.items():
                assert key in node["properties"], f"{path}.{key} is not in values.schema.json"
                walk(sub, node["properties"][key], f"{path}.{key}")

    walk(values, schema, "")
    # Every schema leaf has a description or is a plain container.
    assert schema["additionalProperties"] is False


def test_operator_flags_follow_values() -> None:
    args = operator_deployment(render("minimal"))["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-port=0" in args and "--verbose" not in args
    debug = render(set_values={"operator.logLevel": "debug"})
    assert "--verbose" in operator_deployment(debug)["spec"]["template"]["spec"]["containers"][0]["args"]


def _peers(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return list(rule.get("to") or rule.get("from") or [])


def test_operator_network_policy_lets_it_reach_the_api_dns_redis_and_the_web_only() -> None:
    """Issue 32: the operator POSTs onComplete webhooks and checks sinks where a job's author says, so its
    pod gets an egress policy like the workers': nothing internal beyond the API, DNS and the chart's Redis."""
    policy = one(render(), "NetworkPolicy", "trawl-operator")
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "trawl",
        "app.kubernetes.io/instance": "trawl",
        "app.kubernetes.io/component": "operator",
    }
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["spec"]["ingress"]
    assert "from" not in ingress and [p["port"] for p in ingress["ports"]] == ["metrics", "health", "api"]
    dns, api, redis, web = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53} and _peers(dns) == [{"namespaceSelector": {}}]
    assert [p["port"] for p in api["ports"]] == [443, 6443]
    assert [p["ipBlock"]["except"] for p in _peers(api)] == [["169.254.0.0/16"], ["fe80::/10"]]  # never metadata
    assert [p["port"] for p in redis["ports"]] == [6379]
    assert _peers(redis)[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "redis"
    v4 = next(p["ipBlock"] for p in _peers(web) if p["ipBlock"]["cidr"] == "0.0.0.0/0")
    for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10"):
        assert cidr in v4["except"]  # cluster services, the node, the metadata service: never
    assert {p["port"] for p in web["ports"]} == {80, 443}


def test_operator_network_policy_values(tmp_path: Path) -> None:
    extra = {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 5432, "protocol": "TCP"}]}
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "metrics": {"enabled": False},
                "networkPolicy": {
                    "operator": {"apiServerCIDRs": ["172.18.0.2/32"], "apiServerPorts": [6443], "extraEgress": [extra]}
                },
            }
        )
    )
    policy = one(render(values_files=[values]), "NetworkPolicy", "trawl-operator")
    assert [p["port"] for p in policy["spec"]["ingress"][0]["ports"]] == ["health", "api"]  # no metrics port
    api = policy["spec"]["egress"][1]
    assert _peers(api) == [{"ipBlock": {"cidr": "172.18.0.2/32"}}] and [p["port"] for p in api["ports"]] == [6443]
    assert policy["spec"]["egress"][-1] == extra
    external = one(render("external-redis"), "NetworkPolicy", "trawl-operator")["spec"]["egress"][2]
    assert external == _redis_egress(render("external-redis"))  # the external Redis, as for the workers
    off = render(set_values={"networkPolicy.operator.enabled": "false"})
    assert [p["metadata"]["name"] for p in by_kind(off, "NetworkPolicy")] == ["trawl-workers", "trawl-redis"]


def test_bundled_redis_admits_worker_pods_of_the_worker_namespaces_only() -> None:
    """Issue 32: a pod labelled as a worker in any namespace could reach the bundled Redis."""

    def admitted(docs: list[dict[str, Any]]) -> list[str]:
        peers = one(docs, "NetworkPolicy", "trawl-redis")["spec"]["ingress"][0]["from"]
        workers = next(p for p in peers if "namespaceSelector" in p)
        (expr,) = workers["namespaceSelector"]["matchExpressions"]
        assert (expr["key"], expr["operator"]) == ("kubernetes.io/metadata.name", "In")
        return list(expr["values"])

    assert admitted(render()) == ["trawl-system"]
    watched = render(set_values={"watchNamespaces": "{trawl-system,team-a}"})
    assert admitted(watched) == ["trawl-system", "team-a"]
    listed = render(set_values={"networkPolicy.namespaces": "{team-b}"})
    assert admitted(listed) == ["team-b"]


def test_default_pool_secret_keys_and_cleartext_choice(tmp_path: Path) -> None:
    from trawl.api.scrapepool import ScrapePoolSpec

    keys = [{"name": "pg", "key": "password", "use": "PostgresPassword"}]
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"defaultPool": {"worker": {"secrets": ["pg"], "secretKeys": keys, "allowCleartextPostgresPassword": True}}}
        )
    )
    worker = one(render(values_files=[values]), "ScrapePool")["spec"]["worker"]
    assert worker["secretKeys"] == keys and worker["allowCleartextPostgresPassword"] is True
    spec = ScrapePoolSpec.model_validate(one(render(values_files=[values]), "ScrapePool")["spec"])
    assert spec.worker.allow_cleartext_postgres_password
    assert "allowCleartextPostgresPassword" not in one(render(), "ScrapePool")["spec"]["worker"]


def test_the_results_api_is_served_by_the_operator_pods_with_a_service_tls_and_user_roles() -> None:
    docs = _installed()
    container = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]
    assert "--api-port=8443" in container["args"]
    assert not any(a.startswith("--api-tls") for a in container["args"])  # no Secret given: plain HTTP
    service = one(docs, "Service", "trawl-operator-api")
    assert service["spec"]["ports"] == [{"name": "http", "port": 8443, "targetPort": "api", "protocol": "TCP"}]
    assert service["spec"]["selector"] == operator_deployment(docs)["spec"]["selector"]["matchLabels"]
    policy = one(docs, "NetworkPolicy", "trawl-operator")
    assert {"port": "api", "protocol": "TCP"} in policy["spec"]["ingress"][0]["ports"]
    # the reader and retrier roles: the rules of trawl.operator.rbac, labelled apart from the operator's
    reader = one(docs, "ClusterRole", "trawl-results-reader")
    retrier = one(docs, "ClusterRole", "trawl-dead-letter-retrier")
    assert (_rules(reader), _rules(retrier)) == (RESULTS_READER_RULES, DEAD_LETTER_RETRIER_RULES)
    assert reader["metadata"]["labels"]["app.kubernetes.io/component"] == "results-api"

    tls = _installed(set_values={"api.tls.secretName": "trawl-api-tls"})
    pod = operator_deployment(tls)["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--api-tls-cert=/etc/trawl/api-tls/tls.crt" in args and "--api-tls-key=/etc/trawl/api-tls/tls.key" in args
    assert {"name": "api-tls", "secret": {"secretName": "trawl-api-tls"}} in pod["volumes"]
    assert one(tls, "Service", "trawl-operator-api")["spec"]["ports"][0]["name"] == "https"

    off = _installed(set_values={"api.enabled": "false"})
    assert not any(
        a.startswith("--api") for a in operator_deployment(off)["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert not [d for d in off if d["metadata"]["name"] in ("trawl-operator-api", "trawl-results-reader")]


def test_the_results_api_can_be_registered_as_an_aggregated_api() -> None:
    values = {
        "api.tls.secretName": "trawl-api-tls",
        "api.aggregation.enabled": "true",
        "api.aggregation.caBundle": "Q0E=",
    }
    docs = _installed(set_values=values)
    apiservice = one(docs, "APIService", "v1alpha1.results.trawl.dev")
    assert apiservice["spec"]["service"] == {"namespace": "trawl-system", "name": "trawl-operator-api", "port": 8443}
    assert (apiservice["spec"]["group"], apiservice["spec"]["caBundle"]) == ("results.trawl.dev", "Q0E=")
    assert (
        "--api-requestheader-from-cluster"
        in operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    binding = one(docs, "RoleBinding", "trawl-operator-trawl-system-auth-reader")
    assert (binding["metadata"]["namespace"], binding["roleRef"]["name"]) == AGGREGATED_API_READER_ROLE
    assert binding["subjects"][0]["name"] == service_account_name(docs)
    # the API server calls an aggregated API over TLS only: refused without the certificate's Secret
    with pytest.raises(HelmError, match=r"api\.tls\.secretName"):
        render(set_values={"api.aggregation.enabled": "true"})
    assert not by_kind(_installed(), "APIService")  # off by default


def test_operator_shards_get_a_deployment_each_and_the_main_operator_leaves_them_their_objects() -> None:
    docs = render(set_values={"operator.shards": "{b,c}"})
    operators = {
        d["metadata"]["name"]: d
        for d in by_kind(docs, "Deployment")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"
    }
    assert set(operators) == {"trawl-operator", "trawl-operator-shard-b", "trawl-operator-shard-c"}

    def args(name: str) -> list[str]:
        return list(operators[name]["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--unsharded-only" in args("trawl-operator") and not any(
        a.startswith("--shard") for a in args("trawl-operator")
    )
    for key in ("b", "c"):
        name = f"trawl-operator-shard-{key}"
        assert f"--shard={key}" in args(name) and "--unsharded-only" not in args(name)
        selector = operators[name]["spec"]["selector"]["matchLabels"]
        assert selector["trawl.dev/operator-shard"] == key
        assert operators[name]["spec"]["template"]["metadata"]["labels"]["trawl.dev/operator-shard"] == key
    # The main Deployment's selector is unchanged (selectors are immutable: an upgrade must not touch it).
    plain = operator_deployment(render())
    assert operators["trawl-operator"]["spec"]["selector"] == plain["spec"]["selector"]
    assert "--unsharded-only" not in plain["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("shards", ["{b,b}", "{-bad}", "{a/b}"])
def test_a_bad_shard_list_is_refused_by_the_chart(shards: str) -> None:
    with pytest.raises(HelmError, match=r"operator\.shards"):
        render(set_values={"operator.shards": shards})


def test_the_web_console_is_off_by_default_and_served_by_the_api_when_enabled() -> None:
    args = operator_deployment(_installed())["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--console" not in args
    docs = _installed(set_values={"api.console.enabled": "true"})
    args = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--console" in args and "--api-port=8443" in args
