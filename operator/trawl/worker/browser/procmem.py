"""Memory of a browser: the proportional set size (PSS) of its main process and all its descendants.

PSS counts shared pages once across the processes that share them, so the sum over Chromium's
browser, zygote, renderer and utility processes is what the browser really costs the node.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

PROC = Path("/proc")


def find_pid(marker: str) -> int | None:
    """The browser's main process: the one whose command line carries ``marker`` and is not a child type."""
    return next(iter(find_pids(marker)), None)


def find_pids(marker: str) -> list[int]:
    """The main processes of every browser whose command line carries ``marker`` (a crawler that starts
    several browsers with the same flags has several)."""
    needle = marker.encode()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmd and b"--type=" not in cmd:
            found.append(int(entry.name))
    return found


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields start after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            tree[int(fields[1])].append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    tree = _children()
    out = [pid]
    i = 0
    while i < len(out):
        out.extend(tree.get(out[i], ()))
        i += 1
    return out


def pss_bytes(pid: int) -> int:
    """PSS of ``pid`` (0 when it is gone or unreadable)."""
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def tree_pss_bytes(pid: int) -> int:
    return sum(pss_bytes(p) for p in descendants(pid))


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` plus that of its children already reaped (user + system), 0 when gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(")") + 2 :].split()
    # after the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    ticks = sum(int(f) for f in fields[11:15])
    return ticks / _CLK_TCK


def tree_cpu_seconds(pid: int, exclude: set[int] | None = None) -> float:
    """CPU time of ``pid`` and its live descendants (each counting its reaped children), minus ``exclude`` trees."""
    skip: set[int] = set()
    for e in exclude or ():
        skip.update(descendants(e))
    return sum(cpu_seconds(p) for p in descendants(pid) if p not in skip)


_CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
