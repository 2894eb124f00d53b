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


def test_version() -> None:
    from importlib.metadata import version

    proc = subprocess.run([*TRAWL, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"trawl {version('trawl')}"


def test_bash_completion_script_and_its_callback() -> None:
    script = subprocess.run([*TRAWL, "completion", "bash"], capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_TRAWL_COMPLETE=complete_bash" in script.stdout
    # What the script runs on <TAB> after `trawl st`, with the same environment it sets.
    env = {**os.environ, "_TRAWL_COMPLETE": "complete_bash", "COMP_WORDS": "trawl st", "COMP_CWORD": "1"}
    entry = os.path.join(os.path.dirname(sys.executable), "trawl")  # the name the completion variable is for
    words = subprocess.run([entry], env=env, capture_output=True, text=True, timeout=60).stdout.split()
    assert words == ["status"]
    bad = subprocess.run([*TRAWL, "completion", "tcsh"], capture_output=True, text=True, timeout=60)
    assert (
        bad.returncode == 1 and bad.stderr.startswith("error: unknown shell 'tcsh'") and "Traceback" not in bad.stderr
    )
