"""hack/realnode/node.sh and a bridge it finds already there: another live node's (wait for it, bounded), or
one a killed run left behind (remove it and go on). CI once failed all of the e2e layer because a run killed
with its container had left `cni0` in a network namespace the next run shared.

Each test runs the script's own functions in a network namespace of its own (`unshare -n`), so the host's
network, and a real node the layer may run, are never touched; the namespace and all in it go when the
test's shell exits, also when it fails."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from e2e_node import host_problem

HACK = Path(__file__).resolve().parents[2] / "hack" / "realnode"

pytestmark = pytest.mark.timeout(300)


def in_own_netns(script: str, *, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash, in a new network namespace, with node.sh's functions defined and R set."""
    problem = host_problem()
    if problem:
        pytest.skip(f"no real node: {problem}")
    with tempfile.TemporaryDirectory(prefix="trawl-bridge-") as folder:
        # Whatever the script started (the node's mark) ends with the shell, however the script ends.
        prelude = (
            f"mkdir -p {folder}/log {folder}/pids {folder}/etc; export R={folder}; source {HACK}/node.sh\n"
            "trap 'for f in \"$R\"/pids/*.pid; do [[ -f $f ]] && kill $(cat $f) 2>/dev/null; done; true' EXIT\n"
        )
        return subprocess.run(
            ["unshare", "-n", "bash", "-c", prelude + script],
            capture_output=True,
            text=True,
            timeout=240,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": os.environ.get("HOME", "/root"), **(env or {})},
        )


def test_a_bridge_no_node_holds_is_removed_with_what_its_run_left() -> None:
    out = in_own_netns(
        """
        ip link add cni0 type bridge
        ip link add veth1a2b3c4d type veth peer name eth9
        ip link set veth1a2b3c4d master cni0
        iptables -N KUBE-LEFT-BEHIND
        rc=0; bridge_free || rc=$?   # node.sh runs under set -e
        echo "free=$rc"
        ip link show cni0 >/dev/null 2>&1 && echo "bridge still there"
        ip link show veth1a2b3c4d >/dev/null 2>&1 && echo "veth still there"
        iptables-save | grep -c KUBE-LEFT-BEHIND || true
        """
    )
    assert "free=0" in out.stdout, out
    assert "still there" not in out.stdout, out
    assert out.stdout.strip().endswith("0"), out  # no KUBE- chain left
    assert "no node holds it" in out.stderr, out


def test_a_live_nodes_bridge_is_waited_for_then_refused_after_the_bound() -> None:
    # net_up is the real node's own first step: it marks the namespace, then makes the bridge.
    out = in_own_netns(
        """
        net_up
        node_marked && echo "marked"
        rc=0; bridge_free || rc=$?   # node.sh runs under set -e
        echo "free=$rc"
        ip link show cni0 >/dev/null 2>&1 && echo "bridge kept"
        stop netmark
        node_marked || echo "unmarked"
        rc=0; bridge_free || rc=$?
        echo "then free=$rc"
        ip link show cni0 >/dev/null 2>&1 || echo "bridge gone"
        """,
        env={"REALNODE_BUSY_WAIT": "4"},
    )
    lines = out.stdout.split()
    assert lines == ["marked", "free=3", "bridge", "kept", "unmarked", "then", "free=0", "bridge", "gone"], out
    assert "still up after 4s" in out.stderr, out


def test_a_live_node_that_goes_down_meanwhile_is_waited_for() -> None:
    # The other node's `down` runs while this one waits: it deletes the bridge, then drops its mark.
    out = in_own_netns(
        """
        net_up
        bridge_free 2> "$R/wait.log" &
        waiter=$!
        for _ in $(seq 600); do grep -q "waiting up to" "$R/wait.log" && break; sleep 0.2; done
        ip link delete cni0
        stop netmark
        rc=0; wait "$waiter" || rc=$?
        echo "free=$rc"
        cat "$R/wait.log" >&2
        """
    )
    assert "free=0" in out.stdout, out
    assert "waiting up to 600s" in out.stderr, out
    assert "no node holds it" not in out.stderr, out


def test_a_refused_runs_down_leaves_the_live_nodes_network_alone() -> None:
    # Run folder $R is the live node; $R/other is a run whose `up` was refused (it never recorded the
    # host's state). Its `down` and `leftovers` must not touch or report the live node's bridge.
    out = in_own_netns(
        """
        net_up
        mkdir -p "$R/other/pids" "$R/other/log"
        (R="$R/other"; down; echo "leftovers: $(leftovers | tr '\\n' ' ')")
        ip link show cni0 >/dev/null 2>&1 && echo "bridge kept"
        node_marked && echo "still marked"
        """
    )
    assert out.stdout.splitlines() == ["leftovers: ", "bridge kept", "still marked"], out
    assert "never took the host" in out.stderr, out


def test_a_run_takes_down_only_a_network_it_still_marks() -> None:
    # network_ours decides whether `down` removes the bridge: this run's mark alive, or its holder dead
    # and no one else's mark (a killed run's own leftovers), but never a bridge another node now marks.
    out = in_own_netns(
        """
        mkdir -p "$R/killed/pids" "$R/killed/log"
        sleep 0 & echo $! > "$R/killed/pids/netmark.pid"; wait
        (R="$R/killed"; network_ours && echo "killed, no mark: ours" || echo "killed, no mark: not ours")
        net_up
        network_ours && echo "live: ours" || echo "live: not ours"
        (R="$R/killed"; network_ours && echo "killed, other's mark: ours" || echo "killed, other's mark: not ours")
        (R="$R/killed"; rc=0; net_up 2>/dev/null || rc=$?; echo "second net_up=$rc"
         [[ -f "$R/pids/netmark.pid" ]] && echo "second mark pid kept")
        """
    )
    lines = out.stdout.splitlines()
    assert lines == [
        "killed, no mark: ours",
        "live: ours",
        "killed, other's mark: not ours",
        "second net_up=1",
    ], out
