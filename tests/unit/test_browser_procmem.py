"""Finding a browser's processes by the marker on their command line (trawl.worker.browser.procmem)."""

from __future__ import annotations

import subprocess
import sys
import uuid

from trawl.worker.browser import procmem


def test_every_main_process_with_the_marker_is_found_and_child_types_are_not() -> None:
    marker = f"--trawl-browser=test-{uuid.uuid4().hex}"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    mains = [subprocess.Popen([*sleeper, marker]) for _ in range(2)]  # two browsers of one crawler
    child = subprocess.Popen([*sleeper, marker, "--type=renderer"])  # a browser's renderer: not a main process
    try:
        assert sorted(procmem.find_pids(marker)) == sorted(p.pid for p in mains)
        assert procmem.find_pid(marker) in {p.pid for p in mains}
        assert procmem.find_pids(f"--trawl-browser=test-{uuid.uuid4().hex}") == []
    finally:
        for p in (*mains, child):
            p.kill()
            p.wait()
