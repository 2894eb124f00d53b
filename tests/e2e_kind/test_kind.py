"""The kind end-to-end run (tests/e2e_kind/run.sh, also `make e2e-kind`) as a test: skipped where no
Docker engine answers, since kind runs its nodes as containers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


def test_helm_install_on_kind_completes_a_sample_job() -> None:
    env = {**os.environ, "KUBECTL": str(ROOT / ".venv" / "bin" / "kubectl")}
    result = subprocess.run(
        [str(ROOT / "tests" / "e2e_kind" / "run.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1700
    )
    assert result.returncode == 0, f"{result.stdout[-5000:]}\n{result.stderr[-20000:]}"
    assert "job complete:" in result.stderr
