"""The two commands on a bare machine: a missing system program is one line naming the command, at once.

The absence is real: the commands run as an unprivileged user (nobody, when the run is root), from a fresh
copy of the tree, with a PATH on which ``redis-server`` does not exist (every other program of the machine
is there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _copy_tree(dest: Path) -> None:
    """The files a fresh clone has (tracked and new, not ignored: no .venv, no caches)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    for raw in filter(None, names):
        src = ROOT / raw.decode()
        if src.is_file():
            target = dest / raw.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def _path_without(tmp: Path, missing: set[str]) -> str:
    """A one-directory PATH holding every program of the machine's PATH but ``missing``."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            link = bin_dir / entry.name
            if entry.name not in missing and not link.exists():
                link.symlink_to(entry.path)
    return str(bin_dir)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory the unprivileged user can reach (pytest's tmp_path sits under a root-only 0700 folder)."""
    path = Path(tempfile.mkdtemp(prefix="trawl-bare-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _unprivileged() -> list[str]:
    """The prefix that runs a command as an unprivileged user: none for a run that is not root already."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to run the commands as an unprivileged user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def bare_clone(shared_tmp: Path) -> tuple[Path, str]:
    _unprivileged()
    src = shared_tmp / "trawl"
    _copy_tree(src)
    path = _path_without(shared_tmp, {"redis-server"})
    (shared_tmp / "home").mkdir()
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(shared_tmp)], check=True)
    return src, path


@pytest.mark.parametrize("target", ["demo", "test"])
def test_missing_redis_is_one_line_naming_the_command_within_seconds(bare_clone: tuple[Path, str], target: str) -> None:
    src, path = bare_clone
    env = {"PATH": path, "HOME": str(src.parent / "home"), "LANG": "C.UTF-8"}
    started = time.monotonic()
    proc = subprocess.run(
        [*_unprivileged(), "make", target],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode != 0
    assert elapsed < 10, f"took {elapsed:.1f}s"
    assert len(lines) == 1, lines
    assert "sudo apt-get install -y redis-server" in lines[0]
    assert "Traceback" not in lines[0]
    # Nothing was built or installed before the failure.
    assert not (src / ".venv").exists()


def test_bootstrap_with_everything_present_is_silent() -> None:
    proc = subprocess.run([str(ROOT / "hack" / "bootstrap.sh")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_bootstrap_names_every_missing_package_of_an_extended_list(shared_tmp: Path) -> None:
    """The list is data: a line added for another program is checked with no other change."""
    listing = shared_tmp / "packages"
    listing.write_text(
        "# comment\nredis-server redis-server\npostgresql /nonexistent/lib/postgresql/*/bin/initdb\n"
        "python3-venv python3:ensurepip\nno-such-pkg no-such-command-xyz\n"
    )
    listing.chmod(0o644)
    env = {**os.environ, "TRAWL_PACKAGE_LIST": str(listing)}
    # As root it would install them: unprivileged, the check (not apt) answers.
    argv = _unprivileged()
    proc = subprocess.run(
        [*argv, "bash", str(ROOT / "hack" / "bootstrap.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert proc.stdout.strip() == (
        "trawl: missing postgresql no-such-pkg; install with: sudo apt-get install -y postgresql no-such-pkg"
    )


def test_as_root_bootstrap_installs_what_is_missing(shared_tmp: Path) -> None:
    """The root path for real: a package absent from the machine is installed by apt, then removed."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("needs root and apt-get")
    if shutil.which("sl", path="/usr/games"):
        pytest.skip("the probe package (sl) is installed already")
    listing = shared_tmp / "packages"
    listing.write_text("sl /usr/games/sl\n")
    env = {**os.environ, "TRAWL_PACKAGE_LIST": str(listing)}
    try:
        proc = subprocess.run(
            ["bash", str(ROOT / "hack" / "bootstrap.sh")], env=env, capture_output=True, text=True, timeout=900
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "[bootstrap] installing Debian packages: sl" in proc.stderr
        assert os.access("/usr/games/sl", os.X_OK)
        again = subprocess.run(["bash", str(ROOT / "hack" / "bootstrap.sh")], env=env, capture_output=True, timeout=60)
        assert again.returncode == 0 and again.stderr == b""  # present now: nothing to do
    finally:
        subprocess.run(
            ["apt-get", "-o", "DPkg::Lock::Timeout=300", "purge", "-y", "-qq", "sl"],
            capture_output=True,
            timeout=600,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
