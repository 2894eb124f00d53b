#!/usr/bin/env bash
# kind end-to-end: create a kind cluster, build and load the Trawl image, install the Helm chart
# into a namespace that enforces the restricted Pod Security Standard, serve the bookstore fixture
# site in the cluster, crawl it with a ScrapeJob until Complete, check the counts, tear down.
#
#   make e2e-kind                       # or tests/e2e_kind/run.sh
#   KEEP_CLUSTER=1 make e2e-kind        # leave the cluster up for debugging
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
HELM="$("$ROOT/hack/build-helm.sh")"
KUBECONFIG_FILE="$(mktemp -t trawl-e2e-kubeconfig.XXXXXX)"
export KUBECONFIG="$KUBECONFIG_FILE"
k() { "$KUBECTL" "$@"; }

diagnose() {
  log "diagnostics"
  k get nodes -o wide || true
  k get all,scrapepools,scrapejobs,networkpolicies -A -o wide || true
  k -n "$NS" describe scrapejob e2e-crawl || true
  k -n "$NS" describe scrapepool default || true
  k -n "$NS" logs deployment/trawl-operator --tail=200 || true
  k -n "$NS" logs -l app.kubernetes.io/component=worker --tail=100 --prefix || true
  k get events -A --sort-by=.lastTimestamp | tail -50 || true
}

teardown() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then diagnose; fi
  if [[ -z "${KEEP_CLUSTER:-}" ]]; then
    log "deleting cluster $CLUSTER"
    "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    rm -f "$KUBECONFIG_FILE"
  else
    log "KEEP_CLUSTER set: cluster $CLUSTER kept, KUBECONFIG=$KUBECONFIG_FILE"
  fi
  exit $rc
}
trap teardown EXIT

start=$(date +%s)
log "creating kind cluster $CLUSTER"
"$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
"$KIND" create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" --wait 180s

log "building and loading $IMAGE"
make -C "$ROOT" images IMAGE_TAG=e2e
"$KIND" load docker-image --name "$CLUSTER" "$IMAGE"

log "serving the fixture site"
k apply -f "$HERE/site.yaml"
k -n trawl-e2e-site rollout status deployment/bookstore --timeout="$TIMEOUT"

log "installing the chart into $NS (Pod Security: restricted)"
k create namespace "$NS"
k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted
"$HELM" install trawl "$ROOT/charts/trawl" --namespace "$NS" -f "$HERE/values.yaml" --wait --timeout "$TIMEOUT"
k -n "$NS" rollout status deployment/trawl-operator --timeout="$TIMEOUT"
k -n "$NS" rollout status statefulset/trawl-redis --timeout="$TIMEOUT"
k -n "$NS" wait --for=jsonpath='{.status.observedGeneration}'=1 scrapepool/default --timeout="$TIMEOUT"

log "running the sample job"
k -n "$NS" apply -f "$HERE/job.yaml"
k -n "$NS" wait --for=condition=Complete scrapejob/e2e-crawl --timeout="$TIMEOUT"
succeeded="$(k -n "$NS" get scrapejob e2e-crawl -o jsonpath='{.status.counts.succeeded}')"
total="$(k -n "$NS" get scrapejob e2e-crawl -o jsonpath='{.status.counts.total}')"
dead="$(k -n "$NS" get scrapejob e2e-crawl -o jsonpath='{.status.counts.deadLettered}')"
log "job complete: $succeeded of $total succeeded, ${dead:-0} dead-lettered"
if [[ -z "$succeeded" || "$succeeded" -lt 10 || "${dead:-0}" -ne 0 ]]; then
  log "unexpected counts"
  exit 1
fi
workers="$(k -n "$NS" get scrapepool default -o jsonpath='{.status.lastScale.toReplicas}')"
log "the pool scaled to ${workers:-?} workers at its last decision"

log "uninstalling"
k -n "$NS" delete scrapejob e2e-crawl --wait=true --timeout="$TIMEOUT"
"$HELM" uninstall trawl --namespace "$NS" --wait --timeout "$TIMEOUT"
log "passed in $(( $(date +%s) - start ))s"
