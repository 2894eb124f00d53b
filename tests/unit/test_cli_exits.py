"""`trawl` ends without a traceback on a closed pipe and on user errors raised outside a command's reporting."""

from __future__ import annotations

import os
import subprocess
import sys

TRAWL = [sys.executable, "-m", "trawl.cli"]


def test_closed_pipe_is_a_quiet_exit() -> None:
    # The reader leaves before the command has even started writing (it imports for a second first).
    proc = subprocess.Popen([*TRAWL, "crd", "--stdout"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_dev_up_without_redis_server_is_one_line() -> None:
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # the venv only: no redis-server
    proc = subprocess.run([*TRAWL, "dev", "up"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "error: missing redis-server (not on PATH)",
        "hint: sudo apt-get install -y redis-server",
    ]
