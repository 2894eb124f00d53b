#!/usr/bin/env bash
# `make test`, which is all CI runs (.ci/run): set up everything the suite needs on this machine, then
# lint and run every layer; a skipped test fails the run unless tests/skip_check.py allows it.
#
#   make test             # as root on Debian: nothing is skipped but the kind test without a Docker engine
#   make test E2E=skip    # every layer but e2e (not root, no cgroups): on request only, and said so
#
# Set-up (all cached under ~/.cache/trawl: seconds when warm). The Makefile runs hack/bootstrap.sh (the
# Debian packages) before this script; then:
#   e2e check     a host where no real node can start (not root, no cgroups) stops the run here, with
#                 the reason, unless E2E=skip
#   Python        make setup (.venv from the lock)
#   background    MinIO (nice 10; the sinks layer waits for it) and the real node's binaries and images
#                 (hack/realnode/build.sh, images.sh: ~25-30 min of CPU cold, nice 19; the e2e layer waits
#                 for them, after hack/realnode/deps.sh installed its Debian packages)
#   foreground    kube-apiserver + etcd, make tools (helm, the alert-rule checker, kstatus, actionlint)
# Then make lint (ruff, the import contract, the Dockerfile linter) and make typecheck, then the layers:
# test-layers-main, test-layers-sinks, test-e2e. The first failure stops the run; the background builds
# are stopped with it (their caches take the next run from where they were).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

E2E="${E2E:-}"
case "$E2E" in
  "" | skip) ;;
  *) echo "make test: E2E=$E2E: the one value is E2E=skip (leave the e2e layer out)" >&2; exit 2 ;;
esac

start=$(date +%s)
step() { echo "== [$(( $(date +%s) - start ))s] $*"; }
make=(make --no-print-directory)
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/trawl-test.XXXXXX")"
declare -A BUILDS=()

# in_background NAME NICE CMD...: CMD at nice NICE in a process group of its own (so that the run can stop
# all of it); stdout to $LOGS/NAME.out, stderr and its duration to $LOGS/NAME.log.
in_background() {
  local name=$1 level=$2
  shift 2
  # shellcheck disable=SC2016  # expanded by the inner bash
  setsid nice -n "$level" bash -c 's=$SECONDS; "$@" && rc=0 || rc=$?; echo "[$0] took $((SECONDS - s))s, exit $rc" >&2; exit $rc' \
    "$name" "$@" > "$LOGS/$name.out" 2> "$LOGS/$name.log" &
  BUILDS[$name]=$!
}

# await NAME: wait for a background build; on failure print its log and stop the run.
await() {
  local name=$1 pid=${BUILDS[$1]}
  unset "BUILDS[$1]"
  if ! wait "$pid"; then
    cat "$LOGS/$name.out" "$LOGS/$name.log"
    echo "make test: the background build '$name' failed (its log is above)"
    exit 1
  fi
  grep -E 'took|built' "$LOGS/$name.log" || true
}

stop_builds() {
  local pid
  for pid in "${BUILDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  # Their own exit traps run (images.sh stops its dockerd and unmounts what it mounted).
  for pid in "${BUILDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$LOGS"
}
trap stop_builds EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ "$E2E" != skip ]]; then
  step "e2e: can a real node start here?"
  problem="$(python3 -c 'import sys; sys.path.insert(0, "tests/e2e"); from e2e_node import host_problem; print(host_problem() or "")')"
  if [[ -n "$problem" ]]; then
    echo "make test: the e2e layer cannot run here: $problem."
    echo "make test: to run every other layer here, leave that one out: make test E2E=skip"
    exit 2
  fi
fi

step "Python environment (make setup)"
"${make[@]}" setup

if [[ -z "${TRAWL_MINIO:-}" ]]; then
  step "MinIO in the background (nice 10; the sinks layer waits for it)"
  in_background minio 10 hack/build-minio.sh
fi

step "kube-apiserver and etcd (hack/build-k8s-binaries.sh)"
KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(hack/build-k8s-binaries.sh)}"
export KUBEBUILDER_ASSETS
echo "$KUBEBUILDER_ASSETS"

if [[ "$E2E" != skip ]]; then
  step "real node: Debian packages (hack/realnode/deps.sh), then its binaries and images in the background (nice 19)"
  hack/realnode/deps.sh
  in_background realnode 19 bash -c 'hack/realnode/build.sh && hack/realnode/images.sh'
fi

step "tools: helm, the alert-rule checker, kstatus, actionlint (make tools)"
"${make[@]}" tools

step "make lint typecheck (ruff, import contract, Dockerfiles; mypy)"
"${make[@]}" lint typecheck

# From here every pytest session fails on a skip that tests/skip_check.py does not allow.
export TRAWL_CHECK_SKIPS=1

step "make test-layers-main (every layer but sinks and e2e)"
"${make[@]}" test-layers-main

if [[ -z "${TRAWL_MINIO:-}" ]]; then
  step "sinks: waiting for MinIO"
  await minio
  TRAWL_MINIO="$(tail -1 "$LOGS/minio.out")"
  export TRAWL_MINIO
fi
step "make test-layers-sinks (result sinks: PostgreSQL, MinIO, Redis)"
"${make[@]}" test-layers-sinks

if [[ "$E2E" == skip ]]; then
  step "done; the e2e layer was left out on request (E2E=skip): no real node was built or started"
  exit 0
fi
step "e2e: waiting for the real node's builds"
await realnode
step "make test-e2e (real one-node Kubernetes)"
"${make[@]}" test-e2e
step "done: every layer ran"
