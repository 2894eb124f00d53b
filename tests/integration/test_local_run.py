"""`trawl run job.yaml`: a ScrapeJob manifest run on this machine (its own redis-server, in-process
workers), results on stdout and dead letters on stderr, validated by the operator's models."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from trawl.dev.bookstore import PRODUCT_FIELDS, Bookstore

TRAWL = [sys.executable, "-m", "trawl.cli"]


def _manifest(tmp_path: Path, spec: dict[str, object]) -> Path:
    path = tmp_path / "job.yaml"
    doc = {"apiVersion": "trawl.dev/v1alpha1", "kind": "ScrapeJob", "metadata": {"name": "try"}, "spec": spec}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_run_prints_results_and_dead_letters(site: Bookstore, tmp_path: Path) -> None:
    urls = [site.product_url(i) for i in range(1, 6)] + [f"{site.url}/hostile/404?id=local-run"]
    spec = {
        "pool": "default",
        "urls": urls,
        "extract": {"fields": PRODUCT_FIELDS},
        "politeness": {"requestsPerSecond": 100, "respectRobotsTxt": False},
        "maxDeadLetters": 1,
    }
    proc = subprocess.run(
        [*TRAWL, "run", str(_manifest(tmp_path, spec)), "--allow-cidr", "127.0.0.2/32", "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted(r["url"] for r in records) == sorted(urls[:5])  # one record per page, none for the 404
    assert all(r["status"] == 200 and r.get("title") for r in records), records
    assert "/hostile/404?id=local-run" in proc.stderr and "HTTP4xx" in proc.stderr
    assert "6 tasks: 5 succeeded, 1 dead-lettered; 5 results written" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_rejects_an_invalid_manifest_in_one_line(tmp_path: Path) -> None:
    bad = _manifest(tmp_path, {"pool": "default", "urls": ["https://example.com/"], "priority": 42})
    proc = subprocess.run([*TRAWL, "run", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "spec.priority" in lines[0] and lines[0].startswith("error: invalid ScrapeJob"), lines
