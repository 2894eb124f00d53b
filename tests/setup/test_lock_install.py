"""A fresh virtual environment from the lock installs `.[test,bench]`, and the queue benchmark runs in it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_PEERS = ["trawl", "dramatiq", "celery", "rq", "arq", "huey"]  # BullMQ needs npm: left out here


@pytest.fixture
def fresh_venv() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="trawl-lock-"))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(path / "venv")], check=True, timeout=120)
        yield path / "venv"
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(900)
def test_fresh_venv_from_the_lock_runs_the_queue_benchmark(fresh_venv: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is needed by the benchmark")
    py = str(fresh_venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--require-hashes", "-r", str(ROOT / "requirements" / "bench.txt")], check=True, timeout=600)
    # The package itself on top, as `make setup` does: with its extras, pip must find nothing missing.
    subprocess.run([*pip, "--no-deps", f"{ROOT}[test,bench]"], check=True, timeout=300)
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    bench = subprocess.run(
        [
            py,
            str(ROOT / "bench" / "queue_throughput.py"),
            "--quick",
            "--tasks",
            "300",
            "--only",
            ",".join(PYTHON_PEERS),
            "--no-pipelined",  # claims of 200 per process finish 300 tasks before a window opens
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=fresh_venv.parent,
    )
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-4000:]
    rows = {
        line.split()[0]: line
        for line in bench.stdout.splitlines()
        if line.split()[:1] and line.split()[0] in PYTHON_PEERS
    }
    assert set(rows) == set(PYTHON_PEERS), bench.stdout
    ratio = re.search(r"^ratio_vs_best_peer_c8=([0-9.]+)$", bench.stdout, re.M)
    assert ratio and float(ratio.group(1)) > 0, bench.stdout
    errors = [line for line in bench.stderr.splitlines() if line.startswith("# ") and "Error" in line]
    assert not errors, errors
