"""The release workflow: lints clean with actionlint, and builds, describes (SBOM), signs and pushes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from build_cache import cached

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _actionlint() -> str | None:
    found = shutil.which("actionlint")
    if found:
        return found
    built = cached("tools/actionlint-*/actionlint")
    return str(built) if built else None


def test_actionlint_is_clean() -> None:
    actionlint = _actionlint()
    if actionlint is None:
        pytest.skip("actionlint not built: `make tools` builds it (hack/build-go-tool.sh actionlint)")
    out = subprocess.run([actionlint, str(WORKFLOW)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The control case: the linter really reads workflows (an undefined job output is an error)."""
    actionlint = _actionlint()
    if actionlint is None:
        pytest.skip("actionlint not built: `make tools` builds it")
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("needs.image.outputs.digest", "needs.image.outputs.nosuch"))
    out = subprocess.run([actionlint, str(broken)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode != 0 and "nosuch" in out.stdout


def _steps() -> list[dict[str, Any]]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    return [step for job in doc["jobs"].values() for step in job["steps"]]


def test_builds_from_the_repository_dockerfile_signs_and_describes_the_image() -> None:
    steps = _steps()
    uses = {str(s.get("uses", "")).split("@")[0] for s in steps}
    assert {"docker/build-push-action", "anchore/sbom-action", "sigstore/cosign-installer"} <= uses
    build = next(s for s in steps if str(s.get("uses", "")).startswith("docker/build-push-action"))
    assert build["with"]["file"] == "worker_image/Dockerfile" and build["with"]["push"] is True
    scripts = "\n".join(str(s.get("run", "")) for s in steps)
    assert "cosign sign --yes" in scripts and "cosign attest" in scripts and "helm push" in scripts
