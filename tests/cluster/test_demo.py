"""`make demo` as a newcomer runs it: a fresh stack, a real crawl, autoscaling visible, nothing left behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from trawl.dev.controlplane import ControlPlane


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie whose parent has not reaped it yet is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_dev_up_runs_the_demo_and_stops_everything(control_plane: ControlPlane, tmp_path: Path) -> None:
    # control_plane is requested only so the binaries are known to exist (the demo starts its own).
    pids = tmp_path / "pids"
    env = {
        **os.environ,
        "TRAWL_PIDS_FILE": str(pids),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "KUBEBUILDER_ASSETS": str(control_plane.assets),
    }
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "trawl.cli", "dev", "up", "--timeout", "270"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("DEMO ")), None)
    assert line is not None, out.stdout[-3000:]
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    assert fields["phase"] == "Succeeded"
    assert int(fields["results"]) == int(fields["expected"]) > 0
    replicas = [int(x) for x in fields["replicas"].split(",")]
    workers = [int(x) for x in fields["workers"].split(",")]
    # Autoscaling is visible: the Deployment grew beyond one worker, and the processes followed it up and down.
    assert max(replicas) >= 2, line
    assert max(workers) == max(replicas), line
    assert workers[-1] == 0, line
    assert re.search(r"KUBECONFIG=\S+", out.stdout)
    time.sleep(1)
    started_pids = [int(p) for p in pids.read_text().split()]
    assert len(started_pids) >= 5  # etcd, apiserver, redis, site, operator, workers
    leftovers = [p for p in started_pids if _alive(p)]
    assert leftovers == [], f"still running after `trawl dev up`: {leftovers}"
    print(f"demo finished in {elapsed:.0f}s: {line}")
