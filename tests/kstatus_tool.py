"""kstatus itself (sigs.k8s.io/cli-utils, the health Flux computes) on objects: hack/kstatus, a small Go program
built from the Go module proxy by `make tools` (hack/build-go-tool.sh kstatus) and cached.

The tests ask the build script for it: a warm cache answers at once, a cold one builds it (about 15 s), and a
build that fails fails the test. A test of what GitOps tools read never skips for want of the tool, since
a skip would leave the documented states unchecked.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent


class KStatus(NamedTuple):
    status: str  # Current, InProgress, Failed, Terminating, ...
    message: str


@cache
def kstatus_binary() -> Path:
    """The built tool (built now if the cache lacks this version of hack/kstatus)."""
    build = subprocess.run(
        [str(ROOT / "hack" / "build-go-tool.sh"), "kstatus"], capture_output=True, text=True, timeout=900
    )
    if build.returncode != 0:
        pytest.fail(f"building hack/kstatus failed ({build.returncode}):\n{build.stderr[-3000:]}", pytrace=False)
    return Path(build.stdout.strip().splitlines()[-1])


def kstatus(*objs: dict[str, Any]) -> dict[str, KStatus]:
    """What kstatus computes for each object, by ``<Kind>/<name>``."""
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
    out = subprocess.run([str(kstatus_binary())], input=doc, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kstatus failed: {out.stderr}"
    result: dict[str, KStatus] = {}
    for line in out.stdout.splitlines():
        ref, status, *message = line.split(" ", 2)
        result[ref] = KStatus(status, message[0] if message else "")
    assert len(result) == len(objs), out.stdout
    return result
