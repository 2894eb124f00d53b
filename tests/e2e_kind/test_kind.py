"""The end-to-end scenarios on kind, for users with a Docker engine: the same scenario code as the real-node
suite (tests/e2e/scenarios.py) on a kind cluster made by tests/e2e_kind/run.sh, with the chart installed
with Helm as shipped (tests/e2e_kind/values.yaml: the image and the fixture site's addresses). Skipped
where no Docker engine answers, since kind runs its nodes as containers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helm_chart import helm_binary

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "e2e_kind" / "run.sh"
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # the shared scenarios; tests/e2e is not a package

from e2e_node import RealNode  # noqa: E402
from scenarios import NAMESPACE, crawl_completes_with_exact_results  # noqa: E402


def _docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [
    pytest.mark.skipif(not _docker_engine(), reason="no Docker engine"),
    pytest.mark.slow,
    pytest.mark.timeout(1800),
]


@pytest.fixture(scope="module")
def kind() -> Iterator[RealNode]:
    folder = Path(tempfile.mkdtemp(prefix="trawl-kind-"))
    kubectl = shutil.which("kubectl") or str(ROOT / ".venv" / "bin" / "kubectl")
    env = {**os.environ, "KUBECONFIG": str(folder / "kubeconfig"), "KUBECTL": kubectl}
    try:
        up = subprocess.run([str(RUN), "up"], env=env, capture_output=True, text=True, timeout=1500, check=False)
        assert up.returncode == 0, f"{up.stdout[-5000:]}\n{up.stderr[-20000:]}"
        yield RealNode(root=folder, env={"KUBECONFIG": env["KUBECONFIG"], "KUBECTL": kubectl}, helm_bin=helm_binary())
    finally:
        subprocess.run([str(RUN), "down"], env=env, capture_output=True, timeout=300, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_helm_install_on_kind_crawl_completes_then_uninstalls(kind: RealNode) -> None:
    crawl_completes_with_exact_results(kind, "default")
    kind.kubectl("-n", NAMESPACE, "delete", "scrapejob", "crawl", "--wait=true", "--timeout=120s")
    # The chart's pre-delete hook takes the default pool while the operator still runs.
    kind.helm("uninstall", "trawl", "-n", NAMESPACE, "--wait", "--timeout", "300s")
    assert kind.kubectl("get", "scrapepools,scrapejobs", "-n", NAMESPACE, "-o", "name").strip() == ""
