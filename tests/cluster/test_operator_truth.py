"""The operator tells the truth about every object: hostile specs are rejected or shown as a status,
child Deployments follow their pool, and nothing the operator meets ends as a traceback in its log."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from operator_fixtures import apply, condition, events_for, exists, get, job, pool

from trawl.dev.bookstore import Bookstore
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for

UNREACHABLE_REDIS = "redis://127.0.0.1:1"  # a port nothing listens on: pools are Stalled, not broken
STATUS_BOUND = 60.0  # generous: the machine is shared; the operator's passes run every second


def _try_apply(cp: ControlPlane, obj: dict[str, Any], namespace: str) -> str | None:
    """Apply; the API server's error text if it rejected the object, else None."""
    out = cp.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False
    )  # fmt: skip
    return None if out.returncode == 0 else (out.stderr or out.stdout)


def _truthful(cp: ControlPlane, kind: str, name: str, namespace: str) -> Any:
    """The object once its status reflects its current generation with a Ready condition that explains itself."""
    obj = get(cp, kind, name, namespace)
    status = obj.get("status") or {}
    ready = condition(obj, "Ready")
    if status.get("observedGeneration") != obj["metadata"]["generation"] or ready is None:
        return None
    if ready["status"] == "False" and not ready.get("message") and not condition(obj, "Stalled"):
        return None
    return obj


def _assert_no_tracebacks(operator: Any) -> None:
    text = operator.log_path.read_text(errors="replace")
    assert "Traceback" not in text, operator.log_tail(200)


def test_exact_hostile_manifests_become_statuses(control_plane: ControlPlane, namespace: str, operator: Any) -> None:
    cp = control_plane
    ok_worker = {"concurrency": 4, "drainSeconds": 5}
    # Rejected at admission by the CRD schema (typed tolerations, Quantity pattern).
    for name, worker in [
        ("bad-tolerations", {**ok_worker, "tolerations": [{"key": "a", "operator": "Sometimes"}]}),
        ("bad-tolerations-shape", {**ok_worker, "tolerations": ["NoSchedule"]}),
        ("lots", {**ok_worker, "resources": {"limits": {"cpu": "lots"}}}),
    ]:
        error = _try_apply(cp, pool(name, UNREACHABLE_REDIS, worker=worker), namespace)
        assert error is not None and "Invalid value" in error, (name, error)

    cp.kubectl(
        "create", "secret", "generic", "not-a-url", "-n", namespace, "--from-literal=url=redis://[::1"
    )  # fmt: skip
    cp.kubectl("label", "secret", "not-a-url", "-n", namespace, "trawl.dev/secret=true")  # the operator reads it
    accepted: list[tuple[str, str, str, str]] = [  # kind, name, Stalled reason, text in its message
        ("scrapepool", "bad-url", "InvalidSpec", "not a valid Redis URL"),
        ("scrapepool", "secret-url", "RedisUnavailable", "does not hold a valid Redis URL"),
        ("scrapepool", "bad-node-selector", "InvalidSpec", "not a valid label key"),
        ("scrapepool", "request-above-limit", "DeploymentRejected", "must be less than or equal to cpu limit"),
        ("cronscrapejob", "never-fires", "InvalidSpec", "never fires"),
        ("cronscrapejob", "no-pool", "PoolNotFound", "does not exist"),
        ("scrapejob", "bad-ipv6", "InvalidSpec", "Invalid IPv6 URL"),
    ]
    apply(
        cp,
        pool("bad-url", "redis://[::1"),
        pool("secret-url", UNREACHABLE_REDIS, redis={"urlSecretRef": {"name": "not-a-url", "key": "url"}}),
        pool("bad-node-selector", UNREACHABLE_REDIS, worker={**ok_worker, "nodeSelector": {"bad key!": "x"}}),
        pool(
            "request-above-limit",
            UNREACHABLE_REDIS,
            worker={**ok_worker, "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
        ),
        _cron("never-fires", "0 0 30 2 *", "secret-url"),
        _cron("no-pool", "* * * * *", "missing-pool"),
        job("bad-ipv6", "secret-url", ["http://[::1/x"]),
        namespace=namespace,
    )
    for kind, name, reason, text in accepted:
        obj = wait_for(
            f"{kind}/{name} Stalled/{reason}",
            lambda k=kind, n=name, r=reason: (  # type: ignore[misc]
                (o := _truthful(cp, k, n, namespace)) and (condition(o, "Stalled") or {}).get("reason") == r and o
            ),
            timeout=STATUS_BOUND,
            diag=operator.log_tail,
        )
        stalled = condition(obj, "Stalled")
        assert stalled is not None and stalled["status"] == "True" and text in stalled["message"], (name, stalled)
        assert condition(obj, "Ready")["status"] == "False"  # type: ignore[index]
        # The Event is posted once the status write is accepted, so it can trail the status it explains.
        warnings = wait_for(
            f"{kind}/{name} Warning {reason}",
            lambda n=name, r=reason: [  # type: ignore[misc]
                e for e in events_for(cp, namespace, n) if e["type"] == "Warning" and e["reason"] == r
            ],
            timeout=STATUS_BOUND,
            diag=operator.log_tail,
        )
        assert len(warnings) == 1, (name, warnings)
        assert (
            warnings[0]["source"].get("component") == "trawl-operator"
            or warnings[0].get("reportingComponent") == "trawl-operator"
        )
    assert not exists(cp, "deployment", "request-above-limit-workers", namespace)
    # A cron whose pool is missing created nothing.
    jobs = json.loads(cp.kubectl("get", "scrapejobs", "-n", namespace, "-o", "json").stdout)["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == ["bad-ipv6"]

    # Fixing the spec recovers: the rejected Deployment is created and the pool leaves DeploymentRejected.
    apply(cp, pool("request-above-limit", UNREACHABLE_REDIS, worker=ok_worker), namespace=namespace)
    wait_for(
        "request-above-limit recovered",
        lambda: (
            (o := _truthful(cp, "scrapepool", "request-above-limit", namespace))
            and (condition(o, "Stalled") or {}).get("reason") != "DeploymentRejected"
            and exists(cp, "deployment", "request-above-limit-workers", namespace)
        ),
        timeout=STATUS_BOUND,
        diag=operator.log_tail,
    )
    _assert_no_tracebacks(operator)


def _cron(name: str, schedule: str, pool_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "CronScrapeJob",
        "metadata": {"name": name},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"pool": pool_name, "urls": ["http://127.0.0.1:9/"]}}},
    }


# Hostile values for the fuzz: wrong types, out-of-range numbers, strings the API and Kubernetes reject.
_HOSTILE: list[Any] = [
    -1, 0, 2**40, 1.5, "", "lots", "x" * 300, None, True, [], {}, ["a"], {"bad key!": 1},
    "http://[::1/x", "redis://[::1", "0 0 30 2 *", "../../etc", "\u0000", "-", "NaN",
]  # fmt: skip
# Same-type values that pass a schema but not every consumer (most of what reaches the operator).
_SAME_TYPE: dict[type, list[Any]] = {
    str: ["http://[::1/x", "redis://h:port", "redis://[::1", "0 0 30 2 *", "lots", "bad key!", "-", "x" * 70, "*"],
    int: [-1, 0, 65536, 2**31, 10**6],
    bool: [True, False],
    float: [0.0, -1.0, 1e9],
}


_ADMITTED_BUT_WRONG: list[tuple[int, tuple[str, ...], Any]] = [  # (seed: 0 pool, 1 job, 2 cron), path, value
    (0, ("redis", "url"), "redis://[::1"),
    (0, ("redis", "url"), "redis://h:port/0"),
    (0, ("worker", "nodeSelector"), {"bad key!": "x"}),
    (0, ("worker", "podAnnotations"), {"-x/y": "1"}),
    (0, ("worker", "resources"), {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
    (1, ("urls",), ["http://[::1/x"]),
    (1, ("urls",), ["http://127.0.0.1:99999/"]),
    (1, ("pool",), "missing"),
    (2, ("schedule",), "0 0 30 2 *"),
    (2, ("schedule",), "0 0 31 4 *"),
    (2, ("jobTemplate", "spec", "pool"), "missing"),
    (2, ("jobTemplate", "spec", "urls"), ["http://[::1/x"]),
]


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(obj, list) and obj:
        return [p for i, v in enumerate(obj) for p in _leaves(v, (*path, i))]
    return [path]


def _mutate(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 2)):
        path = rng.choice(_leaves(out["spec"]))
        if not path:
            continue
        node = out["spec"]
        for key in path[:-1]:
            node = node[key]
        same = _SAME_TYPE.get(type(node[path[-1]]))
        node[path[-1]] = rng.choice(same) if same and rng.random() < 0.7 else rng.choice(_HOSTILE)
    return out


def test_fuzzed_invalid_specs_are_rejected_or_explained(
    control_plane: ControlPlane, namespace: str, operator: Any
) -> None:
    """Generated invalid specs: each is rejected by the API server or gets a truthful status in bound."""
    cp = control_plane
    rng = random.Random(15)
    full_pool = pool(
        "p",
        UNREACHABLE_REDIS,
        worker={
            "concurrency": 4,
            "drainSeconds": 5,
            "metricsPort": 9090,
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "podAnnotations": {"a": "b"},
        },
    )
    seeds = [
        full_pool,
        job("j", "p0", ["http://127.0.0.1:9/a"], politeness={"maxConcurrencyPerDomain": 2}, priority=3),
        _cron("c", "*/5 * * * *", "p0"),
    ]
    apply(cp, pool("p0", UNREACHABLE_REDIS), namespace=namespace)
    accepted: list[tuple[str, str]] = []
    rejected = 0
    for i in range(30):
        seed = seeds[i % len(seeds)]
        obj = _mutate(seed, rng)
        obj["metadata"] = {"name": f"{seed['metadata']['name']}-fuzz-{i}"}
        error = _try_apply(cp, obj, namespace)
        if error is None:
            accepted.append((obj["kind"].lower(), obj["metadata"]["name"]))
        else:
            rejected += 1
    for kind, name in accepted:
        wait_for(f"{kind}/{name} truthful status", lambda k=kind, n=name: _truthful(cp, k, n, namespace),  # type: ignore[misc]
                 timeout=STATUS_BOUND, diag=operator.log_tail)  # fmt: skip
    # Values the schema admits but a consumer cannot use: each must end as a status, not a traceback.
    for i, (seed_index, path, value) in enumerate(_ADMITTED_BUT_WRONG):
        obj = copy.deepcopy(seeds[seed_index])
        node = obj["spec"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        obj["metadata"] = {"name": f"{obj['metadata']['name']}-wrong-{i}"}
        error = _try_apply(cp, obj, namespace)
        assert error is None, (path, value, error)
        accepted.append((obj["kind"].lower(), obj["metadata"]["name"]))
    print(f"fuzz: {rejected} rejected by the API server, {len(accepted)} accepted and explained")
    _assert_no_tracebacks(operator)


def test_worker_deployment_follows_the_pool(control_plane: ControlPlane, namespace: str, operator: Any) -> None:
    """Fields set by an earlier plain create are taken over; metricsPort and annotations change and go away."""
    from trawl.api.scrapepool import ScrapePoolSpec
    from trawl.operator.pool.deployment import worker_deployment

    cp = control_plane
    worker = {"concurrency": 4, "drainSeconds": 5, "podAnnotations": {"team": "crawl"}}
    body = pool("p", UNREACHABLE_REDIS, worker=worker)
    apply(cp, body, namespace=namespace)
    uid = get(cp, "scrapepool", "p", namespace)["metadata"]["uid"]
    wait_for("Deployment", lambda: exists(cp, "deployment", "p-workers", namespace), diag=operator.log_tail)

    # What the previous operator version left behind: a Deployment created with a plain create. The
    # operator stops first: a running one recreates the Deployment as soon as it is deleted.
    operator.stop()
    cp.kubectl("delete", "deployment", "p-workers", "-n", namespace, "--wait=true")
    old = worker_deployment(
        namespace=namespace, pool="p", pool_uid=uid, spec=ScrapePoolSpec.model_validate(body["spec"]), replicas=0
    )
    cp.kubectl("create", "-n", namespace, "--field-manager=trawl-autoscaler", "-f", "-", input=json.dumps(old))
    operator.start()

    def container() -> dict[str, Any]:
        dep = get(cp, "deployment", "p-workers", namespace)
        return dep["spec"]["template"]

    apply(cp, pool("p", UNREACHABLE_REDIS, worker={**worker, "metricsPort": 9191}), namespace=namespace)
    template = wait_for(
        "metricsPort 9191 on the Deployment",
        lambda: (t := container())["spec"]["containers"][0]["ports"][0]["containerPort"] == 9191 and t,
        timeout=STATUS_BOUND,
        diag=operator.log_tail,
    )
    assert [p["containerPort"] for p in template["spec"]["containers"][0]["ports"]] == [9191]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == "9191"

    apply(cp, pool("p", UNREACHABLE_REDIS, worker={"concurrency": 4, "drainSeconds": 5}), namespace=namespace)
    wait_for(
        "podAnnotations removed from the Deployment",
        lambda: "team" not in (container()["metadata"].get("annotations") or {}),
        timeout=STATUS_BOUND,
        diag=operator.log_tail,
    )
    assert container()["spec"]["containers"][0]["ports"][0]["containerPort"] == 9090
    obj = wait_for("pool status current", lambda: _truthful(cp, "scrapepool", "p", namespace), diag=operator.log_tail)
    assert (condition(obj, "Stalled") or {}).get("reason") != "DeploymentRejected"
    # Replicas stay the autoscaler's: its manager still owns them after the takeover.
    out = cp.kubectl("get", "deployment", "p-workers", "-n", namespace, "-o", "json", "--show-managed-fields")
    managed = json.loads(out.stdout)["metadata"]["managedFields"]
    owners = {m["manager"] for m in managed if "f:replicas" in json.dumps(m.get("fieldsV1", {}).get("f:spec", {}))}
    assert "trawl-autoscaler" in owners
    _assert_no_tracebacks(operator)


def test_suspended_at_creation_fetches_nothing_and_finished_jobs_block_pool_deletion(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    redis_server: RedisServer,
    bookstore: Bookstore,
) -> None:
    cp = control_plane
    body = pool("p", redis_server.url)
    body["spec"]["autoscaling"]["minReplicas"] = 1
    apply(cp, body, namespace=namespace)
    wait_for(
        "a worker ready",
        lambda: int((get(cp, "scrapepool", "p", namespace).get("status") or {}).get("readyReplicas") or 0) >= 1,
        timeout=120,
        diag=operator.log_tail,
    )
    held = [f"{bookstore.url}/held/{i}" for i in range(6)]
    apply(cp, job("held", "p", held, suspend=True), namespace=namespace)
    wait_for(
        "held Suspended with its seeds",
        lambda: (
            (s := get(cp, "scrapejob", "held", namespace).get("status") or {}).get("phase") == "Suspended"
            and (s.get("counts") or {}).get("total") == len(held)
        ),
        timeout=STATUS_BOUND,
        diag=operator.log_tail,
    )
    # A job enqueued after it runs to completion on the same workers: they were free to claim "held".
    apply(cp, job("control", "p", [f"{bookstore.url}/"]), namespace=namespace)
    wait_for(
        "control finished",
        lambda: (get(cp, "scrapejob", "control", namespace).get("status") or {}).get("phase") == "Succeeded",
        timeout=120,
        diag=operator.log_tail,
    )
    log = bookstore.access_log.read_text() if bookstore.access_log.exists() else ""
    assert "/held/" not in log, log
    assert " GET / " in log, log

    # Dead letters over several passes: one DeadLettered Event for the job, its count updated.
    dead = [f"{bookstore.url}/dead/{i}" for i in range(8)]  # 404: permanent, dead-lettered
    apply(cp, job("dead", "p", dead, retry={"maxAttempts": 1}), namespace=namespace)
    wait_for(
        "dead finished",
        lambda: (get(cp, "scrapejob", "dead", namespace).get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        timeout=120,
        diag=lambda: json.dumps(get(cp, "scrapejob", "dead", namespace).get("status"), indent=1)[:3000],
    )
    lettered = [e for e in events_for(cp, namespace, "dead") if e["reason"] == "DeadLettered"]
    assert len(lettered) == 1, lettered
    assert lettered[0]["count"] >= 1 and lettered[0]["reportingComponent"] == "trawl-operator"
    assert f"({len(dead)} in all)" in lettered[0]["message"], lettered[0]

    uids = [get(cp, "scrapejob", n, namespace)["metadata"]["uid"] for n in ("held", "control", "dead")]
    # Finished or not, a job that names the pool blocks its deletion.
    cp.kubectl("delete", "scrapepool", "p", "-n", namespace, "--wait=false")
    wait_for(
        "DeletionBlocked event",
        lambda: [e for e in events_for(cp, namespace, "p") if e["reason"] == "DeletionBlocked"],
        timeout=STATUS_BOUND,
        diag=operator.log_tail,
    )
    assert exists(cp, "scrapepool", "p", namespace)
    # Deleting the jobs removes every one of their keys, then the pool goes.
    # kubectl waits for the finalizers: the operator cancels each job in Redis first (generous: a loaded CI).
    cp.kubectl("delete", "scrapejob", "held", "control", "dead", "-n", namespace, timeout=180)
    wait_for("pool deleted", lambda: not exists(cp, "scrapepool", "p", namespace), timeout=120, diag=operator.log_tail)
    import redis

    client = redis.Redis.from_url(redis_server.url)
    try:
        keys = list(client.scan_iter(f"trawl:{{{namespace}/p}}*"))
        leftover = [k for k in keys if any(uid.encode() in k for uid in uids)]
    finally:
        client.close()
    assert leftover == [], leftover
    _assert_no_tracebacks(operator)


def _argo_health(kind: str, obj: dict[str, Any]) -> str:
    """The status docs/gitops' Argo CD health check gives the live object (Lua 5.1, as Argo CD runs it)."""
    from pathlib import Path

    from lupa import lua51

    runtime = lua51.LuaRuntime(unpack_returned_tuples=True, register_eval=False)

    def to_lua(value: Any) -> Any:
        if isinstance(value, dict):
            return runtime.table_from({k: to_lua(v) for k, v in value.items()})
        if isinstance(value, list):
            return runtime.table_from([to_lua(v) for v in value])
        return value

    runtime.globals().obj = to_lua(obj)
    script = Path(__file__).resolve().parents[2] / "docs" / "gitops" / "trawl.dev" / kind / "health.lua"
    return str(runtime.execute(script.read_text())["status"])


def test_a_degraded_pool_is_healthy_again_once_its_failing_work_is_gone(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    redis_server: RedisServer,
    bookstore: Bookstore,
) -> None:
    """Every fetch fails: the failure guard holds the pool (Degraded). Once the failing job is deleted
    the pool has no work and scales to zero, and it is not Degraded any more (Argo CD: Healthy),
    without waiting for a fetch to succeed."""
    cp = control_plane
    apply(cp, pool("p", redis_server.url), namespace=namespace)
    failing = [f"{bookstore.url}/hostile/503?id={namespace}-{i}&fail=1000000" for i in range(200)]
    retry = {"maxAttempts": 100, "initialDelaySeconds": 0, "maxDelaySeconds": 0.2, "honorRetryAfter": False}
    apply(cp, job("failing", "p", failing, retry=retry), namespace=namespace)

    def degraded() -> Any:
        cond = condition(get(cp, "scrapepool", "p", namespace), "Degraded")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for("failure guard", degraded, timeout=120, diag=operator.log_tail)
    assert cond["reason"] == "FailureGuard"
    assert _argo_health("ScrapePool", get(cp, "scrapepool", "p", namespace)) == "Degraded"

    cp.kubectl("delete", "scrapejob/failing", "-n", namespace, "--timeout=60s")

    def idle_at_zero() -> Any:
        obj = get(cp, "scrapepool", "p", namespace)
        status, cond = obj.get("status") or {}, condition(obj, "Degraded")
        if status.get("replicas") != 0 or status.get("desiredReplicas") != 0 or not cond:
            return None
        return obj if cond["status"] == "False" else None

    obj = wait_for("idle at zero, not Degraded", idle_at_zero, timeout=120, diag=operator.log_tail)
    assert condition(obj, "Degraded")["reason"] == "Idle"  # type: ignore[index]
    assert _argo_health("ScrapePool", obj) == "Healthy"
    _assert_no_tracebacks(operator)
