"""The repository layout keeps the stdlib `operator` module reachable and the CRDs generated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trawl.api.crd import DEFAULT_TARGETS, all_crds

ROOT = Path(__file__).resolve().parents[2]


def test_operator_folder_is_not_a_package() -> None:
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_stdlib_operator_is_not_shadowed_from_repo_root() -> None:
    code = "import operator, sys; print(operator.__file__ or ''); print(operator.add(2, 3))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    path, result = out.stdout.split()
    assert result == "5"
    assert not path.startswith(str(ROOT / "operator")), path


def test_committed_crds_match_generated() -> None:
    files = all_crds()
    for target in DEFAULT_TARGETS:
        for name, text in files.items():
            committed = (ROOT / target / name).read_text()
            assert committed == text, f"{target}/{name} drifted from the models: run `trawl crd`"


def test_crd_generation_is_deterministic() -> None:
    assert all_crds() == all_crds()
