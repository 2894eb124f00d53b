"""The image the chart and the operator deploy (worker_image/Dockerfile), checked without a Docker
engine: BuildKit's own Dockerfile lint when it is built, plus the properties the pods rely on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from build_cache import cached
from helm_chart import operator_deployment, render
from trawl.operator.pool.deployment import worker_deployment

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "worker_image" / "Dockerfile"
LINTER = ROOT / "hack" / "lint-dockerfile.sh"


def _stages() -> list[list[str]]:
    """Instructions (continuation lines joined, comments dropped) grouped by stage."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[str]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_buildkit_lint_is_clean() -> None:
    if cached("k8s/dockerfile-lint-buildkit-*/dockerfile-lint") is None:
        pytest.skip("BuildKit Dockerfile linter not built: `make lint` builds it (hack/lint-dockerfile.sh)")
    out = subprocess.run([str(LINTER), str(DOCKERFILE)], capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_multi_stage_on_a_pinned_slim_base() -> None:
    preamble, *stages = _stages()
    assert len(stages) >= 2
    base = next(line for line in preamble if line.startswith("ARG PYTHON_IMAGE="))
    assert re.fullmatch(r"ARG PYTHON_IMAGE=docker\.io/library/python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base)
    assert all(stage[0].startswith("FROM ${PYTHON_IMAGE}") for stage in stages)


def test_final_stage_runs_as_the_chart_user_without_build_tools() -> None:
    final = _stages()[-1]
    text = "\n".join(final)
    assert not re.search(r"\b(apt-get install|gcc|build-essential|libc6-dev|pip install)\b", text), text
    user = next(line for line in final if line.startswith("USER "))
    uid = int(user.split()[1].split(":")[0])
    assert uid != 0
    pod = operator_deployment(render())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid, "the chart's runAsUser must be the image's user"
    assert 'ENTRYPOINT ["trawl"]' in final


def test_oci_labels() -> None:
    text = " ".join(_stages()[-1])
    for label in ("title", "description", "source", "licenses", "version", "revision", "created"):
        assert f"org.opencontainers.image.{label}=" in text, label


def test_worker_pods_use_the_image_entrypoint() -> None:
    """The operator's worker container passes only args; the image's ENTRYPOINT supplies `trawl`."""
    from trawl.api.scrapepool import ScrapePoolSpec

    spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}})
    deployment = worker_deployment(namespace="n", pool="p", pool_uid="u", spec=spec, replicas=1)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "command" not in container and container["args"][0] == "worker"


def test_dockerignore_admits_only_the_package() -> None:
    lines = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!operator/"} <= set(lines)
