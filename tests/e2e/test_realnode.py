"""Trawl on a real one-node Kubernetes: the image built here, the chart installed with Helm as shipped,
worker pods run by a real kubelet and containerd. Scenarios of issue 12, each asserting exact counts and
results; times worth knowing (pod start-up, scale-up) are printed, never asserted (see bench/).

The tests share one node and one release (session fixtures) and run in file order: the last ones
upgrade and uninstall the release.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import Any

import pytest
import yaml
from e2e_node import IMAGE, ROOT, CommandFailed, RealNode, pod_ready, run
from scenarios import (
    FAST,
    SITE,
    SLOW_SITE,
    PodDeletions,
    assert_records,
    assert_succeeded,
    crawl_completes_with_exact_results,
    diagnose,
    expected_products,
    job,
    job_status,
    ready_workers,
    results,
    site_fetches,
    wait_finished,
    wait_no_workers,
    worker_pods,
)

from conftest import CHART_POOL, NAMESPACE, POOL, RELEASE, hostpath_volume, pool_object
from waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _counts(node: RealNode, name: str) -> dict[str, Any]:
    return dict(job_status(node, name).get("counts") or {})


def _in_flight(node: RealNode, name: str) -> int:
    return int((job_status(node, name).get("counts") or {}).get("inFlight", 0))


def test_operator_ready_and_a_crawl_completes_with_exact_results(release: RealNode) -> None:
    node = release
    op = node.items("pods", NAMESPACE, "app.kubernetes.io/component=operator")
    assert op and all(pod_ready(p) for p in op), op
    crawl_completes_with_exact_results(node, POOL)


def test_results_from_a_kubeconfig_alone_through_the_aggregated_api_with_the_console_on(release: RealNode) -> None:
    """Issue 36: with the chart's results API registered as an aggregated API (and the console on), `trawl
    results` needs a kubeconfig and nothing else (no port-forward, no Redis password) and gives exactly the
    job's records: each once, equal to what its Redis stream holds."""
    node = release

    def available() -> bool:
        service = node.get("apiservice", "v1alpha1.results.trawl.dev", "") or {}
        conditions = (service.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)

    wait_for("the results APIService Available", available, 180, 2.0)
    crawl_completes_with_exact_results(node, POOL, name="viaapi")
    argv = [sys.executable, "-m", "trawl.cli", "results", "viaapi", "-n", NAMESPACE, "--kubeconfig", node.kubeconfig]
    lines = [line for line in run(argv, timeout=180, env={"TRAWL_API_URL": ""}).splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    stored = results(node, "viaapi")  # read inside the Redis pod, with the password: what the API must match
    assert len(records) == len(stored) == len({r["url"] for r in records}), (len(records), len(stored))
    assert {r["url"]: r for r in records} == stored
    # The console answers on the API's Service (here through the API server's service proxy): its sign-in page.
    proxy = f"/api/v1/namespaces/{NAMESPACE}/services/https:{RELEASE}-operator-api:8443/proxy"
    page = node.kubectl("get", "--raw", f"{proxy}/console/login")
    assert "<form" in page and "token" in page.lower(), page[:500]


def test_backlog_scales_up_real_pods_then_drains_to_zero_with_nothing_lost(release: RealNode) -> None:
    """Scale-up from zero on a backlog (time to the first Ready pod printed), then the scale-down while
    pods are still busy: idle pods go first (the operator's pod-deletion-cost, 1000 + the tasks a pod's
    worker reports in flight), SIGTERM drains under the real kubelet, no task interrupted or lost (every
    URL exactly one record, and fetched exactly once by the site)."""
    node = release
    # A pool of its own: the autoscaler keeps what it measured per pool, and the crawl's fast pages
    # would make one worker look enough for anything. A drain longer than the slow task below.
    scale = pool_object("scale", drainSeconds=90)
    # Polls 6 s apart: a drained backlog releases the pool at the second poll without one (rule 5), by
    # when the backlog's last 3-s tasks have ended and only the busy task below holds a pod. At 2 s the
    # release could come while every pod still held backlog tasks (2 of 3 runs on 2026-11-27), leaving no
    # idle pod for the step down to prefer.
    scale["spec"]["autoscaling"]["pollSeconds"] = 6
    node.apply([scale])
    ids = range(1, 101)
    urls = [f"{SLOW_SITE}/product/{i}.html" for i in ids]  # 3 s each: a backlog one pod drains in ~75 s
    # One slow task (~50 s), submitted once the backlog is all claimed: it keeps one pod busy while the
    # others run out of work, so the scale-down that follows has a busy pod to keep and idle ones to drop.
    busy_url = f"{SLOW_SITE}/product/7.html?delay=45"
    since = time.time()
    started = time.monotonic()
    try:
        _scale_up_then_drain(node, urls, ids, busy_url, since, started)
    finally:  # the other scenarios share the release: never leave this pool's workers behind
        node.kubectl(
            "-n",
            NAMESPACE,
            "delete",
            "scrapejob",
            "backlog",
            "busy",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        )
        node.kubectl(
            "-n", NAMESPACE, "delete", "scrapepool", "scale", "--ignore-not-found", "--wait=true", "--timeout=120s"
        )


def _scale_up_then_drain(
    node: RealNode, urls: list[str], ids: range, busy_url: str, since: float, started: float
) -> None:
    with PodDeletions(node, "scale") as watched:
        node.apply([job("backlog", "scale", urls, politeness=FAST)])
        wait_for("a worker pod Ready", lambda: ready_workers(node, "scale"), 300, 0.5)
        first_ready = time.monotonic() - started
        _log(f"backlog -> first worker pod Ready: {first_ready:.1f}s")
        peak = wait_for(
            "a scale-up beyond one pod",
            lambda: len(worker_pods(node, "scale")) > 1 and len(worker_pods(node, "scale")),
            300,
            0.5,
        )
        _log(f"backlog -> {peak} worker pods: {time.monotonic() - started:.1f}s")
        wait_for("the backlog all claimed", lambda: _counts(node, "backlog").get("pending") == 0, 600, 0.5)
        node.apply([job("busy", "scale", [busy_url], politeness=FAST, request={"timeoutSeconds": 120})])
        status = wait_finished(node, "backlog", 600)
        busy = wait_finished(node, "busy", 300)
        seconds = wait_no_workers(node, "scale", 600)
        _log(f"drained -> zero pods: {seconds:.1f}s")
    assert_succeeded(node, "backlog", status, len(urls))
    assert_records(results(node, "backlog"), expected_products(SLOW_SITE, ids))
    assert_succeeded(node, "busy", busy, 1)
    assert_records(results(node, "busy"), {busy_url: expected_products(SLOW_SITE, range(7, 8))[urls[6]]})
    assert watched.error is None, watched.error
    _log(
        "scale-down deletions (pod, cost, cost before the last change, kept costs): "
        f"{[(d.pod, d.cost, d.earlier_cost, watched.kept(d)) for d in watched.deletions]}"
    )
    for d in watched.deletions:
        # Among Ready pods the ReplicaSet deletes the lowest cost first: never a busier pod than one kept,
        # by the costs the scale-down was written with (the deleted pod's cost then, or, if a later pass
        # rewrote it before the deletion, the one before that). A step of two deletes two pods at once.
        kept = watched.kept(d)
        if d.ready and kept:
            lowest_kept = min((c or 0 for c in kept.values()), default=0)
            chosen_at = min(d.cost or 0, d.earlier_cost or 0) if d.earlier_cost is not None else d.cost or 0
            assert chosen_at <= lowest_kept, (d, kept)
    busy_kept = [
        d for d in watched.deletions if (d.cost or 0) == 0 and any((c or 0) > 1000 for c in watched.kept(d).values())
    ]
    assert busy_kept, f"no scale-down kept a busy pod (cost > 1000) over an idle one: {watched.deletions}"
    # Not interrupted: a task given back on SIGTERM would be fetched a second time.
    fetched = site_fetches(node, "bookstore-slow", since)
    expected = {f"/product/{i}.html": 1 for i in ids} | {"/product/7.html?delay=45": 1}
    assert fetched == expected, {k: v for k, v in fetched.items() if expected.get(k) != v}


def test_worker_container_killed_in_place_recovers_within_a_lease(release: RealNode) -> None:
    """SIGKILL of the worker's process (as an OOM kill does): the kubelet restarts the container in the
    same pod; the tasks the dead incarnation held come back within one lease and the job completes."""
    node = release
    ids = range(61, 85)
    urls = [f"{SLOW_SITE}/product/{i}.html" for i in ids]
    node.apply([job("killed", POOL, urls, politeness=FAST)])
    wait_for("tasks in flight", lambda: _in_flight(node, "killed") > 0 and ready_workers(node, POOL), 300, 0.5)
    pod = ready_workers(node, POOL)[0]
    name = pod["metadata"]["name"]
    container = pod["status"]["containerStatuses"][0]
    node.ctr("tasks", "kill", "-s", "SIGKILL", container["containerID"].removeprefix("containerd://"))
    killed = time.monotonic()

    def restarted() -> dict[str, Any] | None:
        p = node.get("pod", name, NAMESPACE)
        cs = ((p or {}).get("status", {}).get("containerStatuses") or [{}])[0]
        return p if cs.get("restartCount", 0) > container.get("restartCount", 0) and pod_ready(p or {}) else None

    wait_for(f"{name} restarted in place", restarted, 300, 0.5)
    back = time.monotonic()
    _log(f"worker container killed -> running again in the same pod: {back - killed:.1f}s")
    # Bounded: the lease (20 s) plus the few pages left, with room for a loaded machine.
    status = wait_finished(node, "killed", 240)
    _log(f"restart -> job finished: {time.monotonic() - back:.1f}s (lease 20s)")
    assert_succeeded(node, "killed", status, len(urls))
    assert_records(results(node, "killed"), expected_products(SLOW_SITE, ids))


def _micro_time(stamp: str) -> float:
    """A Lease's MicroTime (RFC 3339, microseconds) as epoch seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _operator_lease(node: RealNode, operators: list[str]) -> dict[str, Any]:
    """The Lease the operator replicas elect a leader on (its holder is "<pod>_<random>")."""
    for lease in node.items("leases", NAMESPACE):
        holder = lease["spec"].get("holderIdentity") or ""
        if holder.rpartition("_")[0] in operators:
            return lease
    raise AssertionError(f"no Lease held by one of {operators}")


def test_operator_leader_killed_mid_job_the_standby_takes_over_within_the_lease(release: RealNode) -> None:
    """SIGKILL of the leading operator replica's process mid-job (the chart runs two): the standby takes
    the Lease within the lease duration of the leader's last renewal, the job completes, every page is
    fetched once (nothing enqueued twice), and the killed container comes back as a standby."""
    node = release
    ids = range(40, 61)
    urls = [f"{SLOW_SITE}/product/{i}.html" for i in ids]
    pods = wait_for(
        "two operator replicas Ready",
        lambda: (
            [p for p in node.items("pods", NAMESPACE, "app.kubernetes.io/component=operator") if pod_ready(p)]
            if len(node.items("pods", NAMESPACE, "app.kubernetes.io/component=operator")) == 2
            else None
        ),
        300,
        1,
    )
    started = time.time()
    node.apply([job("failover", POOL, urls, politeness=FAST)])
    wait_for("tasks in flight", lambda: _in_flight(node, "failover") > 0, 300, 0.5)
    lease = _operator_lease(node, [p["metadata"]["name"] for p in pods])
    duration = float(lease["spec"]["leaseDurationSeconds"])
    old_holder = lease["spec"]["holderIdentity"]
    leader = next(p for p in pods if p["metadata"]["name"] == old_holder.rpartition("_")[0])
    container = leader["status"]["containerStatuses"][0]
    node.ctr("tasks", "kill", "-s", "SIGKILL", container["containerID"].removeprefix("containerd://"))
    # The dead leader's last renewal: its renewTime no longer moves once the process is gone.
    last_renewal = _micro_time(node.get("lease", lease["metadata"]["name"], NAMESPACE)["spec"]["renewTime"])

    def taken() -> dict[str, Any] | None:
        now = node.get("lease", lease["metadata"]["name"], NAMESPACE) or {}
        return now if (now.get("spec") or {}).get("holderIdentity") not in (None, "", old_holder) else None

    new = wait_for("the standby holds the Lease", taken, 120, 0.25)
    takeover = _micro_time(new["spec"]["acquireTime"]) - last_renewal
    _log(f"leader killed -> standby took the Lease {takeover:.2f}s after the last renewal (lease {duration:.0f}s)")
    # Not before the lease ran out, and within it (1.5 s for the API write on a loaded node).
    assert duration - 0.5 <= takeover <= duration + 1.5, (takeover, duration)
    # A new incarnation leads: the standby pod, or the killed pod's container restarted by the kubelet,
    # which stands by like any replica and can win the expired Lease (CI saw both); never the dead process.
    assert new["spec"]["holderIdentity"] != old_holder

    status = wait_finished(node, "failover", 600)
    assert_succeeded(node, "failover", status, len(urls))
    assert_records(results(node, "failover"), expected_products(SLOW_SITE, ids))
    fetched = site_fetches(node, "bookstore-slow", started)
    assert fetched == {f"/product/{i}.html": 1 for i in ids}, fetched

    def restarted() -> dict[str, Any] | None:
        p = node.get("pod", leader["metadata"]["name"], NAMESPACE) or {}
        cs = (p.get("status", {}).get("containerStatuses") or [{}])[0]
        return p if cs.get("restartCount", 0) > container.get("restartCount", 0) and pod_ready(p) else None

    wait_for("the killed replica running again as a standby", restarted, 300, 1)


def test_operator_pod_deleted_mid_job_a_new_one_finishes_it(release: RealNode) -> None:
    node = release
    ids = range(85, 101)
    urls = [f"{SLOW_SITE}/product/{i}.html" for i in ids]
    node.apply([job("orphaned", POOL, urls, politeness=FAST)])
    wait_for("tasks in flight", lambda: _in_flight(node, "orphaned") > 0, 300, 0.5)
    old = {p["metadata"]["name"] for p in node.items("pods", NAMESPACE, "app.kubernetes.io/component=operator")}
    node.kubectl("-n", NAMESPACE, "delete", "pod", *old, "--wait=false")

    def new_operator() -> list[dict[str, Any]]:
        pods = node.items("pods", NAMESPACE, "app.kubernetes.io/component=operator")
        return [p for p in pods if p["metadata"]["name"] not in old and pod_ready(p)]

    wait_for("a new operator pod Ready", new_operator, 300, 1)
    status = wait_finished(node, "orphaned", 600)
    assert_succeeded(node, "orphaned", status, len(urls))
    assert_records(results(node, "orphaned"), expected_products(SLOW_SITE, ids))


def test_pool_template_change_rolls_out_to_new_pods(release: RealNode) -> None:
    node = release
    pool = pool_object("tmpl", podAnnotations={"e2e.trawl.dev/remove-me": "yes"})
    pool["spec"]["autoscaling"] = {"enabled": False}
    pool["spec"]["replicas"] = 1
    node.apply([pool])
    first = wait_for("one Ready tmpl worker", lambda: ready_workers(node, "tmpl"), 300, 1)[0]
    assert first["metadata"]["annotations"].get("e2e.trawl.dev/remove-me") == "yes"
    changed = pool_object("tmpl", env=[{"name": "E2E_MARK", "value": "two"}], metricsPort=9191)
    changed["spec"]["worker"]["resources"] = {
        "requests": {"cpu": "30m", "memory": "80Mi"},
        "limits": {"memory": "400Mi"},
    }
    changed["spec"]["autoscaling"] = {"enabled": False}
    changed["spec"]["replicas"] = 1
    # A replace, not a merge: the annotation is gone from the pool, so it must go from the pods too.
    node.kubectl(
        "replace",
        "-f",
        "-",
        input=json.dumps(
            {
                **changed,
                "metadata": {
                    **changed["metadata"],
                    "resourceVersion": node.get("scrapepool", "tmpl", NAMESPACE)["metadata"]["resourceVersion"],
                },
            }
        ),
    )  # type: ignore[index]

    def rolled() -> dict[str, Any] | None:
        pods = ready_workers(node, "tmpl")
        return next(
            (
                p
                for p in pods
                if p["metadata"]["name"] != first["metadata"]["name"] and len(worker_pods(node, "tmpl")) == 1
            ),
            None,
        )

    try:
        pod = wait_for("the tmpl rollout", rolled, 300, 1)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{diagnose(node)}") from None
    c = pod["spec"]["containers"][0]
    assert {"name": "E2E_MARK", "value": "two"} in c.get("env", [])
    assert c["resources"] == {"requests": {"cpu": "30m", "memory": "80Mi"}, "limits": {"memory": "400Mi"}}
    assert 9191 in [p["containerPort"] for p in c.get("ports", [])]
    assert "e2e.trawl.dev/remove-me" not in (pod["metadata"].get("annotations") or {})
    deploy = node.get("deployment", "tmpl-workers", NAMESPACE) or {}
    assert "e2e.trawl.dev/remove-me" not in (deploy["spec"]["template"]["metadata"].get("annotations") or {})
    node.kubectl("delete", "scrapepool", "tmpl", "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def test_invalid_pool_template_is_refused_or_shows_on_the_pool_status(release: RealNode) -> None:
    """A change the CRD schema can judge is refused at admission with the server's message; one only the
    API server's Deployment validation catches (a label value with spaces) shows on the pool's status."""
    node = release
    pool = pool_object("tmpl-bad")
    pool["spec"]["autoscaling"] = {"enabled": False}
    pool["spec"]["replicas"] = 1
    node.apply([pool])
    try:
        _invalid_template_shows(node)
    finally:
        node.kubectl("delete", "scrapepool", "tmpl-bad", "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def _invalid_template_shows(node: RealNode) -> None:
    wait_for(
        "the tmpl-bad pool observed",
        lambda: (node.get("scrapepool", "tmpl-bad", NAMESPACE) or {}).get("status", {}).get("deployment"),
        120,
        1,
    )
    bad_quantity = json.dumps({"spec": {"worker": {"resources": {"limits": {"memory": "lots"}}}}})
    with pytest.raises(CommandFailed, match="lots"):
        node.kubectl("patch", "scrapepool", "tmpl-bad", "-n", NAMESPACE, "--type=merge", "-p", bad_quantity)
    bad_selector = json.dumps({"spec": {"worker": {"nodeSelector": {"disk": "fast or slow"}}}})
    node.kubectl("patch", "scrapepool", "tmpl-bad", "-n", NAMESPACE, "--type=merge", "-p", bad_selector)

    def shows_error() -> dict[str, Any] | None:
        obj = node.get("scrapepool", "tmpl-bad", NAMESPACE)
        bad = [
            c for c in (obj or {}).get("status", {}).get("conditions") or [] if "fast or slow" in c.get("message", "")
        ]
        return bad[0] if bad else None

    cond = wait_for("the invalid template on the pool's status", shows_error, 120, 1)
    _log(f"invalid template: {cond}")


# Issue 32's takeover: the operator's ServiceAccount (the chart's release "trawl"), privileged, the node's /.
TAKEOVER: dict[str, Any] = {
    "spec": {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "serviceAccountName": f"{RELEASE}-operator",
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "own",
                        "image": IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "ls /host; cat /var/run/secrets/kubernetes.io/serviceaccount/token"],
                        "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                    }
                ],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
            }
        },
    }
}
TENANT = "e2e-tenant"


def _tenant_rbac() -> list[dict[str, Any]]:
    """A job author: ScrapeJobs and CronScrapeJobs in the release namespace, nothing else."""
    meta = {"name": TENANT, "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {
                    "apiGroups": ["trawl.dev"],
                    "resources": ["scrapejobs", "cronscrapejobs"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT},
            "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": NAMESPACE}],
        },
    ]


def test_tenant_job_template_runs_nothing_on_the_real_node(release: RealNode) -> None:
    """A job author who may not create Jobs writes onComplete.jobTemplate with the operator's ServiceAccount,
    a privileged container and hostPath /. On a real kubelet nothing of it runs: no Job, no pod; the job's
    status.onComplete.job is Failed (JobTemplateNotAllowed) with one Warning Event. The namespace's Pod
    Security admission is relaxed to privileged meanwhile (restored after), so that it is the operator, not
    the namespace's restricted profile, that keeps it from running."""
    node = release
    node.apply(_tenant_rbac())
    as_tenant = f"--as=system:serviceaccount:{NAMESPACE}:{TENANT}"
    assert node.kubectl(as_tenant, "auth", "can-i", "create", "jobs", "-n", NAMESPACE, check=False).strip() == "no"
    assert node.kubectl(as_tenant, "auth", "can-i", "create", "scrapejobs", "-n", NAMESPACE).strip() == "yes"
    relax = "pod-security.kubernetes.io/enforce=privileged"
    node.kubectl("label", "namespace", NAMESPACE, relax, "--overwrite")
    try:
        spec = job("takeover", POOL, [f"{SITE}/product/1.html"], politeness=FAST, onComplete={"jobTemplate": TAKEOVER})
        node.kubectl(as_tenant, "apply", "-f", "-", input=json.dumps(spec))
        wait_finished(node, "takeover", 600)
        hook = wait_for(
            "status.onComplete.job", lambda: (job_status(node, "takeover").get("onComplete") or {}).get("job"), 120, 2
        )
        assert node.get("job", "takeover-on-complete", NAMESPACE) is None, "a Job was created from the template"
        privileged = [
            p["metadata"]["name"]
            for p in node.items("pods", NAMESPACE)
            if any((c.get("securityContext") or {}).get("privileged") for c in p["spec"]["containers"])
            or any("hostPath" in v for v in p["spec"].get("volumes") or [])
            or p["metadata"].get("labels", {}).get("job-name") == "takeover-on-complete"
        ]
        assert privileged == [], privileged
        assert (hook["state"], hook.get("reason")) == ("Failed", "JobTemplateNotAllowed"), hook
        assert "onComplete.job" in hook["message"], hook
        events = json.loads(
            node.kubectl(
                "get", "events", "-n", NAMESPACE, "-o", "json",
                "--field-selector", "involvedObject.name=takeover,reason=JobTemplateNotAllowed",
            )
        )["items"]  # fmt: skip
        assert len(events) == 1 and events[0]["type"] == "Warning", events
        _log(f"jobTemplate refused: {hook['message']}")
    finally:
        node.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
        node.kubectl(
            "-n", NAMESPACE, "delete", "scrapejob", "takeover", "--ignore-not-found", "--wait=true", "--timeout=120s"
        )


def test_helm_upgrade_rolls_the_operator(release: RealNode) -> None:
    node = release
    for name in ("crawl", "killed", "orphaned"):
        node.kubectl(
            "-n", NAMESPACE, "delete", "scrapejob", name, "--ignore-not-found", "--wait=true", "--timeout=120s"
        )
    before = node.get("deployment", "trawl-operator", NAMESPACE) or {}
    node.helm(
        "upgrade",
        RELEASE,
        str(ROOT / "charts" / "trawl"),
        "-n",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "operator.logLevel=debug",
        "--wait",
        "--timeout",
        "300s",
    )
    after = node.get("deployment", "trawl-operator", NAMESPACE) or {}
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    assert "--verbose" in json.dumps(after["spec"]["template"]["spec"]["containers"][0])
    node.kubectl("-n", NAMESPACE, "rollout", "status", "deploy/trawl-operator", "--timeout=300s")


def test_helm_uninstall_refuses_while_a_job_names_the_pool_then_leaves_only_the_crds(release: RealNode) -> None:
    """The chart's pre-delete hook deletes its default ScrapePool while the operator still runs (whose
    finalizer would otherwise hold the uninstall forever). While a job names the pool it refuses: helm
    fails with the hook's reason, the pool untouched; once the job is gone, a bare `helm uninstall`."""
    node = release
    # The scenarios' own pool and jobs are the user's objects, not the release's: removed the usual way.
    node.kubectl("-n", NAMESPACE, "delete", "scrapejobs", "--all", "--wait=true", "--timeout=120s")
    node.kubectl("-n", NAMESPACE, "delete", "scrapepool", POOL, "--wait=true", "--timeout=120s")
    # Suspended: it names the pool (which is all that blocks a deletion) without starting any work.
    node.apply([job("pinned", CHART_POOL, [f"{SITE}/product/1.html"], suspend=True)])
    try:
        started = time.monotonic()
        with pytest.raises(CommandFailed, match=r"1 ScrapeJobs still name it \(pinned\)"):
            node.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "300s")
        _log(f"helm uninstall refused by the pre-delete hook in {time.monotonic() - started:.1f}s")
        pool = node.get("scrapepool", CHART_POOL, NAMESPACE) or {}
        assert pool and "deletionTimestamp" not in pool["metadata"], pool.get("metadata")
        assert node.get("deployment", "trawl-operator", NAMESPACE), "the release stays installed"
        node.kubectl("-n", NAMESPACE, "delete", "scrapejob", "pinned", "--wait=true", "--timeout=120s")
        started = time.monotonic()
        node.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "300s")
        _log(f"helm uninstall (pre-delete hook, then the release) in {time.monotonic() - started:.1f}s")
    finally:
        # Whatever the outcome, leave no pool stuck on a finalizer for the scenarios after this one.
        for name in node.kubectl("get", "scrapepools", "-n", NAMESPACE, "-o", "name").split():
            node.kubectl(
                "patch", name, "-n", NAMESPACE, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False
            )
        node.helm_uninstall_quietly(RELEASE, NAMESPACE)
    assert node.kubectl("get", "scrapepools,scrapejobs", "-n", NAMESPACE, "-o", "name").strip() == ""
    # Everything of the release goes (the hooks' Jobs, pods, ServiceAccounts and Roles included: they carry
    # its labels), nothing with Helm's keep policy either. Pods go after their owners. The Secret with the
    # Redis password is not the release's (the pre-install hook made it in the cluster, without the
    # release's instance label): it stays, so a reinstall finds the same password.
    kinds = "all,cm,secret,sa,role,rolebinding,networkpolicy,pdb,scrapepools,scrapejobs"

    def leftovers() -> tuple[list[str], list[str]]:
        out = node.kubectl("get", kinds, "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=trawl", "-o", "json")
        items = [
            (f"{o['kind']}/{o['metadata']['name']}", o["metadata"].get("annotations") or {})
            for o in json.loads(out)["items"]
        ]
        kept = [n for n, a in items if a.get("helm.sh/resource-policy") == "keep"]
        return [n for n, a in items if a.get("helm.sh/resource-policy") != "keep"], kept

    try:
        wait_for("the release's objects to go", lambda: not leftovers()[0] or None, 180, 2)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {leftovers()[0]}") from None
    assert leftovers()[1] == []
    kept = node.get("secret", "trawl-redis", NAMESPACE) or {}
    assert (kept.get("metadata") or {}).get("labels", {}).get("trawl.dev/secret") == "true", kept.get("metadata")
    cluster_left = node.kubectl(
        "get", "clusterrole,clusterrolebinding", "-l", "app.kubernetes.io/instance=trawl", "-o", "name"
    )
    assert cluster_left.strip() == ""
    crds = node.kubectl("get", "crd", "-o", "name")
    assert {"customresourcedefinition.apiextensions.k8s.io/scrapejobs.trawl.dev"} <= set(crds.split())


def test_kustomize_install_path_runs_a_job(release: RealNode) -> None:
    """`kubectl apply -k manifests/` (rendered by the node's kubectl, the operator image swapped for the
    one built here, as `kustomize edit set image` would), then a job on a pool of its Redis."""
    node = release
    docs = [d for d in yaml.safe_load_all(node.kubectl("kustomize", str(ROOT / "manifests"))) if d]
    for doc in docs:
        if doc["kind"] == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                c["image"], c["imagePullPolicy"] = IMAGE, "Never"
    installed = [d for d in docs if d["kind"] not in ("CustomResourceDefinition", "Namespace")]
    node.apply([hostpath_volume(node, "trawl-e2e-redis-kustomize")])
    node.apply(docs)
    try:
        node.kubectl(
            "-n", NAMESPACE, "rollout", "status", "deploy/trawl-operator", "statefulset/redis", "--timeout=300s"
        )
        pool = pool_object("kustomized")
        pool["spec"]["redis"] = {"url": "redis://redis.trawl-system.svc:6379/0"}
        ids = range(1, 6)
        node.apply([pool, job("kustomized", "kustomized", [f"{SITE}/product/{i}.html" for i in ids], politeness=FAST)])
        status = wait_finished(node, "kustomized", 600)
        assert_succeeded(node, "kustomized", status, len(ids))
        node.kubectl("-n", NAMESPACE, "delete", "scrapejob,scrapepool", "kustomized", "--wait=true", "--timeout=120s")
    finally:
        node.kubectl(
            "delete",
            "-f",
            "-",
            "--ignore-not-found",
            "--wait=false",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": installed}),
            check=False,
        )
