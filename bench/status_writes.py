#!/usr/bin/env python3
"""What one ScrapeJob status write costs the API server, etcd and the client: server-side apply (what the
operator does, ``trawl.operator.kube.apply_status``) against a JSON merge patch of the same status.

Starts a local control plane (etcd + kube-apiserver, the cluster tests' binaries), creates ``--jobs``
ScrapeJobs, then writes each one's status ``--rounds`` times per kind from 16 threads (the operator's API
thread count), the kinds alternating which goes first. Per round: wall time, the CPU of etcd and the API
server per write (``/proc``), this process's CPU per write (the client: the kubernetes client in 16
threads, as in the operator) and the 1-minute load.

    KUBEBUILDER_ASSETS=... .venv/bin/python bench/status_writes.py [--jobs 400] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kubernetes.client as kc

from trawl.api.naming import API_VERSION, GROUP, VERSION
from trawl.dev.controlplane import ControlPlane, find_assets
from trawl.worker.browser import procmem

PLURAL, NAMESPACE, THREADS = "scrapejobs", "bench", 16


def status(job: int, step: int) -> dict[str, Any]:
    """A status of the shape the operator writes (phase, counts, three conditions, results)."""
    at = f"2026-11-29T16:00:{step % 60:02d}Z"
    done = step % 10
    return {
        "phase": "Running" if step % 2 else "Succeeded",
        "observedGeneration": 1,
        "startTime": at,
        "counts": {
            "total": 10,
            "succeeded": done,
            "inFlight": 0,
            "retrying": 0,
            "deadLettered": 0,
            "pending": 10 - done,
        },
        "progress": done * 10,
        "progressText": f"{done}/10",
        "enqueued": 10,
        "queueEpoch": f"e{job}",
        "priority": 0,
        "politeness": {"requestsPerSecond": 2.0, "maxConcurrencyPerDomain": 2},
        "conditions": [
            {
                "type": kind,
                "status": "True" if step % 2 else "False",
                "reason": f"Step{step}",
                "message": f"step {step} of job {job}",
                "lastTransitionTime": at,
                "observedGeneration": 1,
            }
            for kind in ("Ready", "Running", "Complete")
        ],
        "results": {"count": step, "sink": "RedisStream", "location": "redis"},
    }


def writers(custom: kc.CustomObjectsApi) -> dict[str, Callable[[int, int], object]]:
    def apply(job: int, step: int) -> object:
        body = {
            "apiVersion": API_VERSION,
            "kind": "ScrapeJob",
            "metadata": {"name": f"j{job}", "namespace": NAMESPACE},
            "status": status(job, step),
        }
        return custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, NAMESPACE, PLURAL, f"j{job}", body,
            field_manager="trawl-operator", force=True, _content_type="application/apply-patch+yaml",
        )  # fmt: skip

    def merge(job: int, step: int) -> object:
        return custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, NAMESPACE, PLURAL, f"j{job}", {"status": status(job, step)},
            _content_type="application/merge-patch+json",
        )  # fmt: skip

    return {"apply": apply, "merge": merge}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with ControlPlane(find_assets()) as cp:
        cp.apply_crds()
        client = cp.api_client()
        client.configuration.connection_pool_maxsize = THREADS
        custom = kc.CustomObjectsApi(client)
        cp.kubectl("create", "namespace", NAMESPACE)
        spec = {"pool": "p", "urls": [f"http://site.test/{k}" for k in range(10)]}

        def create(job: int) -> object:
            body = {"apiVersion": API_VERSION, "kind": "ScrapeJob", "metadata": {"name": f"j{job}"}, "spec": spec}
            return custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)

        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(create, range(args.jobs)))
        kinds = writers(custom)
        step = 0
        for round_ in range(args.rounds):
            for name in sorted(kinds, reverse=bool(round_ % 2)):
                step += 1
                before = {k: procmem.cpu_seconds(pid) for k, pid in cp.pids.items()}
                mine, start = time.process_time(), time.monotonic()
                with ThreadPoolExecutor(THREADS) as pool:
                    list(pool.map(lambda job, s=step, w=kinds[name]: w(job, s), range(args.jobs)))
                wall = time.monotonic() - start
                per = {k: (procmem.cpu_seconds(pid) - before[k]) / args.jobs * 1000 for k, pid in cp.pids.items()}
                client_ms = (time.process_time() - mine) / args.jobs * 1000
                print(
                    f"round {round_} {name:<5} writes={args.jobs} wall={wall:.2f}s cpu_ms/write: "
                    + " ".join(f"{k}={v:.2f}" for k, v in per.items())
                    + f" client={client_ms:.2f} load={os.getloadavg()[0]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
