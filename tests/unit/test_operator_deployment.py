"""The worker Deployment rendered from a ScrapePool."""

from __future__ import annotations

import pytest

from trawl.api.naming import queue_prefix
from trawl.api.scrapepool import DEFAULT_WORKER_IMAGE, ScrapePoolSpec
from trawl.operator.pool.deployment import WorkerDefaults, worker_deployment


def _spec(**kw: object) -> ScrapePoolSpec:
    raw: dict[str, object] = {"redis": {"url": "redis://redis:6379/0"}}
    raw.update(kw)
    return ScrapePoolSpec.model_validate(raw)


def _env(dep: dict) -> dict:  # type: ignore[type-arg]
    return {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_restricted_pod_and_owner() -> None:
    dep = worker_deployment(namespace="ns", pool="p", pool_uid="u1", spec=_spec(), replicas=None)
    assert "replicas" not in dep["spec"]
    owner = dep["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ScrapePool", "u1", True)
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["terminationGracePeriodSeconds"] == 30 + 10
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_secret_passed_by_reference_only() -> None:
    spec = _spec(
        redis={"urlSecretRef": {"name": "redis", "key": "url"}, "passwordSecretRef": {"name": "r", "key": "p"}}
    )
    env = _env(worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=spec, replicas=2))
    assert env["TRAWL_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "redis", "key": "url"}
    assert env["TRAWL_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "r", "key": "p"}
    assert "value" not in env["TRAWL_REDIS_PASSWORD"]


def test_queue_prefix_and_worker_settings() -> None:
    spec = _spec(worker={"concurrency": 7, "drainSeconds": 50, "allowedCidrs": ["127.0.0.0/8"]})
    dep = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=spec, replicas=3)
    env = _env(dep)
    assert env["TRAWL_QUEUE_PREFIX"]["value"] == queue_prefix("ns", "p") == "trawl:{ns/p}"
    assert env["TRAWL_CONCURRENCY"]["value"] == "7"
    assert env["TRAWL_ALLOWED_CIDRS"]["value"] == "127.0.0.0/8"
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60


def test_pool_secrets_mounted_read_only_by_name() -> None:
    spec = _spec(worker={"secrets": ["webhook-hmac", "other", "webhook-hmac"]})
    dep = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=spec, replicas=1)
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert set(mounts) == {"/tmp", "/var/run/trawl/secrets/webhook-hmac", "/var/run/trawl/secrets/other"}
    hmac_mount = mounts["/var/run/trawl/secrets/webhook-hmac"]
    assert hmac_mount["readOnly"] is True
    assert volumes[hmac_mount["name"]]["secret"]["secretName"] == "webhook-hmac"
    assert len(volumes) == 3  # a name listed twice is mounted once
    assert _env(dep)["TRAWL_SECRETS_DIR"]["value"] == "/var/run/trawl/secrets"
    plain = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=_spec(), replicas=1)
    assert "TRAWL_SECRETS_DIR" not in _env(plain)
    assert [v["name"] for v in plain["spec"]["template"]["spec"]["volumes"]] == ["tmp"]


def _pod(spec: ScrapePoolSpec, defaults: WorkerDefaults | None = None) -> dict:  # type: ignore[type-arg]
    dep = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=spec, replicas=1, defaults=defaults)
    return dep["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_image_and_pull_secrets_default_from_the_operator_and_the_pool_overrides() -> None:
    chart = WorkerDefaults(image="registry.example/trawl:1.2.3", image_pull_secrets=["regcred"])
    pod = _pod(_spec(), chart)
    assert pod["containers"][0]["image"] == "registry.example/trawl:1.2.3"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    own = _spec(worker={"image": "mine/trawl:dev", "imagePullSecrets": ["a", "b", "a"]})
    pod = _pod(own, chart)
    assert pod["containers"][0]["image"] == "mine/trawl:dev"
    assert pod["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]
    # An explicit empty list means "none", not "the operator's".
    assert "imagePullSecrets" not in _pod(_spec(worker={"imagePullSecrets": []}), chart)
    bare = _pod(_spec(), WorkerDefaults())
    assert bare["containers"][0]["image"] == DEFAULT_WORKER_IMAGE and "imagePullSecrets" not in bare


def test_worker_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAWL_WORKER_IMAGE", "r.example/t:9")
    monkeypatch.setenv("TRAWL_WORKER_IMAGE_PULL_SECRETS", "one, two,")
    assert WorkerDefaults.from_env() == WorkerDefaults("r.example/t:9", ["one", "two"])


def test_pod_security_context_without_fixed_ids_when_asked() -> None:
    assert _pod(_spec(), WorkerDefaults())["securityContext"]["runAsUser"] == 10001
    openshift = _spec(worker={"podSecurityContext": {"runAsNonRoot": True}})
    ctx = _pod(openshift, WorkerDefaults())["securityContext"]
    assert ctx == {"runAsNonRoot": True}


VOLUMES = {
    "volumes": [
        {"name": "results", "persistentVolumeClaim": {"claimName": "trawl-results"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "fuse", "csi": {"driver": "s3.csi.example.com", "readOnly": True, "volumeAttributes": {"b": "x"}}},
    ],
    "volumeMounts": [
        {"name": "results", "mountPath": "/data/results"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "fuse", "mountPath": "/data/ro"},
    ],
}


def test_pool_volumes_in_kubernetes_shapes() -> None:
    pod = _pod(_spec(worker=VOLUMES))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["results"] == {"name": "results", "persistentVolumeClaim": {"claimName": "trawl-results"}}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}
    assert volumes["fuse"]["csi"] == {"driver": "s3.csi.example.com", "readOnly": True, "volumeAttributes": {"b": "x"}}
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "results", "mountPath": "/data/results"} in mounts
    assert {"name": "tmp", "mountPath": "/tmp"} in mounts  # the worker's own stay


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        ({"volumes": [{"name": "v"}]}, "exactly one of persistentVolumeClaim, emptyDir or csi"),
        ({"volumes": [{"name": "v", "emptyDir": {}, "csi": {"driver": "d"}}]}, "exactly one"),
        ({"volumeMounts": [{"name": "nope", "mountPath": "/data"}]}, "not in worker.volumes"),
        ({"volumes": [{"name": "tmp", "emptyDir": {}}]}, "reserved"),
        ({"volumes": [{"name": "v", "emptyDir": {}}], "volumeMounts": [{"name": "v", "mountPath": "/tmp/x"}]}, "/tmp"),
        ({"volumes": [{"name": "v", "emptyDir": {}}], "volumeMounts": [{"name": "v", "mountPath": "/var"}]}, "/tmp"),
    ],
)
def test_pool_volumes_refused(worker: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _spec(worker=worker)


def test_json_lines_directory_must_be_on_a_writable_pool_volume() -> None:
    from trawl.api.scrapejob import ScrapeJobSpec
    from trawl.jobspec.admission import unmounted_directory

    def job(directory: str) -> ScrapeJobSpec:
        output = {"sink": "JsonLines", "jsonLines": {"directory": directory}}
        return ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://e.test/"], "output": output})

    pool = _spec(worker=VOLUMES)
    assert unmounted_directory(job("/data/results"), pool) is None
    assert unmounted_directory(job("/data/results/2026/crawl"), pool) is None
    assert unmounted_directory(job("/scratch"), pool) is None
    reason = unmounted_directory(job("/data/resultsX"), pool)
    assert reason is not None and "/data/resultsX is not on a writable volume" in reason
    assert "mounts: /data/results, /scratch, /data/ro" in reason
    assert unmounted_directory(job("/data/ro/x"), pool) is not None  # a read-only CSI volume
    assert unmounted_directory(job("/data/results"), _spec()) is not None  # no volumes at all
    other = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://e.test/"]})
    assert unmounted_directory(other, _spec()) is None  # not a JsonLines job


def test_a_browser_job_needs_a_pool_with_browser_workers() -> None:
    from trawl.api.scrapejob import ScrapeJobSpec
    from trawl.jobspec.admission import browser_missing

    def job(render: dict[str, object] | None) -> ScrapeJobSpec:
        return ScrapeJobSpec.model_validate({"pool": "plain", "urls": ["https://e.test/"], "render": render})

    reason = browser_missing(job({"mode": "Browser"}), _spec())
    assert reason is not None and "ScrapePool 'plain' runs plain workers" in reason
    assert "spec.worker.browser" in reason
    assert browser_missing(job({"mode": "Browser"}), _spec(worker={"browser": {}})) is None
    assert browser_missing(job(None), _spec()) is None  # plain fetching runs anywhere
    assert browser_missing(job({"mode": "Fetch"}), _spec()) is None


def test_the_pools_circuit_breaker_settings_reach_the_workers() -> None:
    from trawl.api.scrapepool import ScrapePoolSpec

    def env_of(worker: dict[str, object]) -> dict[str, str]:
        spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379"}, "worker": worker})
        dep = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=spec, replicas=1)
        [container] = dep["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    off = env_of({"circuitBreaker": {"failureThreshold": 0, "openSeconds": 12.5}})
    assert (off["TRAWL_BREAKER_FAILURES"], off["TRAWL_BREAKER_OPEN_SECONDS"]) == ("0", "12.5")
    assert not any(name.startswith("TRAWL_BREAKER_") for name in env_of({}))  # the worker's defaults
