#!/usr/bin/env bash
# kind cluster for the end-to-end scenarios (tests/e2e/scenarios.py, shared with the real-node suite):
# `up` creates a kind cluster, builds and loads the Trawl image, serves the bookstore fixture site,
# installs the Helm chart into a namespace that enforces the restricted Pod Security Standard; `down`
# deletes the cluster. tests/e2e_kind/test_kind.py runs up, the scenarios, down.
#
#   make e2e-kind                                  # pytest tests/e2e_kind (skipped without Docker)
#   KUBECONFIG=/tmp/kind.kubeconfig tests/e2e_kind/run.sh up     # then kubectl/helm at it
#   tests/e2e_kind/run.sh down
#
# Needs a Docker engine. kind and helm are built from the Go module proxy (hack/build-*.sh, cached).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tests/e2e_kind"
CLUSTER="${KIND_CLUSTER:-trawl-e2e}"
NS="${TRAWL_NAMESPACE:-trawl-system}"
IMAGE="ghcr.io/trawl-dev/trawl:e2e"
TIMEOUT="${E2E_TIMEOUT:-300s}"
KUBECTL="${KUBECTL:-$(command -v kubectl || echo "$ROOT/.venv/bin/kubectl")}"

log() { echo "[e2e-kind $(date -u +%H:%M:%S)] $*" >&2; }

if ! docker info >/dev/null 2>&1; then
  log "no Docker engine (docker info failed): cannot run the kind end-to-end test"
  exit 2
fi
KIND="$("$ROOT/hack/build-kind.sh")"

diagnose() {
  log "diagnostics"
  k get nodes -o wide || true
  k get all,scrapepools,scrapejobs,networkpolicies -A -o wide || true
  k -n "$NS" describe scrapepool default || true
  k -n "$NS" logs deployment/trawl-operator --tail=200 || true
  k get events -A --sort-by=.lastTimestamp | tail -50 || true
}
k() { "$KUBECTL" "$@"; }

up() {
  : "${KUBECONFIG:?set KUBECONFIG to the file to write the kubeconfig of the cluster to}"
  local helm; helm="$("$ROOT/hack/build-helm.sh")"
  trap 'rc=$?; if [[ $rc -ne 0 ]]; then diagnose; fi' EXIT
  log "creating kind cluster $CLUSTER"
  "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  "$KIND" create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" --wait 180s

  log "building and loading $IMAGE"
  make -C "$ROOT" images IMAGE_TAG=e2e
  "$KIND" load docker-image --name "$CLUSTER" "$IMAGE"

  log "serving the fixture site"
  k apply -f "$HERE/site.yaml"
  k -n trawl-e2e-site rollout status deployment/bookstore --timeout="$TIMEOUT"

  log "installing the chart into $NS (Pod Security: restricted)"
  k create namespace "$NS"
  k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted
  "$helm" install trawl "$ROOT/charts/trawl" --namespace "$NS" -f "$HERE/values.yaml" --wait --timeout "$TIMEOUT"
  k -n "$NS" rollout status deployment/trawl-operator --timeout="$TIMEOUT"
  k -n "$NS" rollout status statefulset/trawl-redis --timeout="$TIMEOUT"
  k -n "$NS" wait --for=jsonpath='{.status.observedGeneration}'=1 scrapepool/default --timeout="$TIMEOUT"
  log "up"
}

down() {
  log "deleting cluster $CLUSTER"
  "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 64 ;;
esac
