"""The chart on every distribution: GitOps-stable Redis credentials, worker image and pull secrets from
the chart, OpenShift without fixed ids, monitoring objects only where their API exists, alert rules."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from build_cache import cached
from helm_chart import CHART, HelmError, by_kind, one, operator_deployment, render
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator import metrics
from trawl.operator.pool.deployment import WorkerDefaults, worker_deployment
from trawl.redisconn.memory import RedisMemory

ROOT = Path(__file__).resolve().parents[2]
ALERTS = CHART / "files" / "alerts.yaml"
MONITORING_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
ID_KEYS = ("runAsUser", "runAsGroup", "fsGroup")


def _worker_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The worker pod the operator of this render would create for the chart's default pool."""
    container = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    defaults = WorkerDefaults(
        image=env["TRAWL_WORKER_IMAGE"],
        image_pull_secrets=[s for s in env.get("TRAWL_WORKER_IMAGE_PULL_SECRETS", "").split(",") if s],
    )
    pool = one(docs, "ScrapePool")
    spec = ScrapePoolSpec.model_validate(pool["spec"])
    dep = worker_deployment(
        namespace="trawl-system", pool=pool["metadata"]["name"], pool_uid="u", spec=spec, replicas=1, defaults=defaults
    )
    return dep["spec"]["template"]["spec"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------ Redis credentials


def test_existing_secret_renders_identically_twice_and_no_secret() -> None:
    values = {"redis.bundled.existingSecret": "my-redis"}
    first, second = render(set_values=values), render(set_values=values)
    assert first == second
    assert not [s for s in by_kind(first, "Secret") if "redis" in s["metadata"]["name"]]
    sts = one(first, "StatefulSet")
    assert "my-redis" in yaml.safe_dump(sts)
    assert one(first, "ScrapePool")["spec"]["redis"]["urlSecretRef"] == {"name": "my-redis", "key": "url"}


def test_given_password_renders_identically_twice() -> None:
    values = {"redis.bundled.password": "from-a-vault-plugin"}
    assert render(set_values=values) == render(set_values=values)


def test_the_default_install_renders_identically_twice_and_no_password() -> None:
    """What Argo CD runs (`helm template`, no cluster to look anything up in) gives the same manifests every
    time, with no Secret in them: the password is made in the cluster by a hook, once (test_chart.py)."""
    first, second = render(), render()
    assert first == second
    assert not by_kind(first, "Secret")
    templates = list((CHART / "templates").glob("*.yaml"))
    assert templates and all("lookup" not in path.read_text() for path in templates), (
        "no template depends on what a render can see of the cluster"
    )


# ------------------------------------------------------------------------------ images and pull secrets


def test_worker_pods_carry_the_charts_pull_secrets_and_image() -> None:
    docs = render("openshift")
    pod = _worker_pod(docs)
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["image"] == "registry.example.com/crawling/trawl:0.1.0"
    # The operator pulls with the same Secret.
    assert operator_deployment(docs)["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_worker_image_defaults_to_the_operators_own() -> None:
    docs = render(set_values={"image.tag": "9.9.9"})
    pod = _worker_pod(docs)
    operator_image = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert pod["containers"][0]["image"] == operator_image == "ghcr.io/trawl-dev/trawl:9.9.9"
    assert "imagePullSecrets" not in pod


# ------------------------------------------------------------------------------ OpenShift


def _security_contexts(obj: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("securityContext", "podSecurityContext") and isinstance(value, dict):
                found.append(value)
            found += _security_contexts(value)
    elif isinstance(obj, list):
        for item in obj:
            found += _security_contexts(item)
    return found


def test_openshift_values_render_without_fixed_ids() -> None:
    docs = render("openshift")
    contexts = _security_contexts(docs) + _security_contexts(_worker_pod(docs))
    assert len(contexts) >= 6  # operator, Redis and worker pods and containers
    assert not [c for c in contexts if any(k in c for k in ID_KEYS)], contexts
    assert all(c.get("runAsNonRoot") is True for c in contexts if "runAsNonRoot" in c)
    # The default keeps the images' fixed ids.
    default = render()
    assert any("runAsUser" in c for c in _security_contexts(default))
    assert _worker_pod(default)["securityContext"]["runAsUser"] == 10001


# ------------------------------------------------------------------------------ monitoring


def test_monitoring_objects_only_where_their_api_exists() -> None:
    with_api = render("metrics")
    assert {k: len(by_kind(with_api, k)) for k in MONITORING_KINDS} == dict.fromkeys(MONITORING_KINDS, 1)
    without = render("metrics", api_versions=())
    assert not [d for d in without if d["kind"] in MONITORING_KINDS]
    assert one(without, "Service", "trawl-operator-metrics")  # plain metrics still served


def test_prometheus_rule_carries_every_alert_with_extra_labels() -> None:
    rule = one(render("metrics"), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    rendered = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    source = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    assert [r["alert"] for r in rendered] == [r["alert"] for r in source]
    for got, want in zip(rendered, source, strict=True):
        assert got["expr"] == want["expr"]
        assert got["labels"] == {**want["labels"], "team": "crawling"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"securityContext.fixedIds": "maybe"}, "fixedIds"),
        ({"workerImage": "has space"}, "workerImage"),
        ({"metrics.prometheusRule.enabled": "yes"}, "enabled"),
        ({"metrics.prometheusRule.bogus": "1"}, "bogus"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, str], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        render(set_values=values)


# ------------------------------------------------------------------------------ alert rules


def _exported_names() -> set[str]:
    """Every series name the operator's registry exports with a pool and a job known to it."""
    metrics.record_pool(
        "ns", "p", {"queue": {"ready": 1}, "conditions": []}, redis_memory=RedisMemory(1, 2, "noeviction")
    )
    metrics.record_job("uid-x", "ns", "j", "p", {"phase": "Running"})
    try:
        return {s.name for family in metrics.REGISTRY.collect() for s in family.samples} | {
            family.name for family in metrics.REGISTRY.collect()
        }
    finally:
        metrics.forget_pool("ns", "p")
        metrics.forget_job("uid-x")


def test_every_alert_reads_series_the_operator_exports() -> None:
    exported = _exported_names()
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} >= {
        "TrawlOperatorDown",
        "TrawlJobFailed",
        "TrawlDeadLettersGrowing",
        "TrawlPoolDegraded",
        "TrawlBacklogTooOld",
        "TrawlRedisNearlyFull",
        "TrawlTenantThrottled",
    }
    for rule in rules:
        names = set(re.findall(r"\b(trawl_[a-z0-9_]+)", rule["expr"]))
        assert names, f"{rule['alert']} reads no Trawl series"
        assert names <= exported, f"{rule['alert']}: {names - exported} not exported by the operator"


def _rule_checkers() -> list[list[str]]:
    """`promtool check rules` if built, and hack/rulecheck (the same parser and validation, a fraction of
    promtool's cold build), whichever exist in the build cache (tests/build_cache.py) or on PATH."""
    found: list[list[str]] = []
    promtool = shutil.which("promtool") or cached("tools/promtool-*/promtool")
    if promtool:
        found.append([str(promtool), "check", "rules"])
    rulecheck = cached("tools/rulecheck-*/rulecheck")
    if rulecheck:
        found.append([str(rulecheck)])
    return found


def test_alert_rules_pass_the_prometheus_rule_check(tmp_path: Path) -> None:
    checkers = _rule_checkers()
    if not checkers:
        pytest.skip("no rule checker built: `make tools` builds one (hack/build-go-tool.sh rulecheck)")
    broken = tmp_path / "broken.yaml"
    broken.write_text(ALERTS.read_text().replace("> 900", "> > 900"))  # a PromQL syntax error
    for argv in checkers:
        out = subprocess.run([*argv, str(ALERTS)], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "SUCCESS: 8 rules found" in out.stdout
        # The control case: the checker really parses the expressions.
        bad = subprocess.run([*argv, str(broken)], capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0 and "parse error" in bad.stderr, bad.stdout + bad.stderr
