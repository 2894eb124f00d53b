# Shared by hack/realnode/*.sh (source it): versions, cache folders, logging, the Go toolchain.
# Everything built is cached under ~/.cache/trawl keyed by version, so a warm run takes seconds.
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KUBE_VERSION="${KUBE_VERSION:-v1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.7}"
# containerd 2.x from the Go module proxy: kubelet 1.36 refuses Debian's containerd 1.6.
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
ASSETS="${KUBEBUILDER_ASSETS:-$CACHE_ROOT/k8s/${KUBE_VERSION}-etcd-${ETCD_VERSION}}"   # kube-apiserver + etcd (hack/build-k8s-binaries.sh)
NODE_BIN="$CACHE_ROOT/k8s/${KUBE_VERSION}-node"                            # kubelet, kube-proxy, ...
# coredns_plugins: the directives of the Corefile in coredns.yaml, in order of appearance. CoreDNS is
# built with these plugins only (build.sh); the folder is keyed by them, so a Corefile that uses
# another plugin builds a new binary.
coredns_plugins() {
  awk '/Corefile: \|/ {on = 1; next}
       on && /^---/ {exit}
       on { line = $0; sub(/^[ \t]+/, "", line); n = split(line, w, /[ \t]+/)
            if (depth == 1 && n > 0 && w[1] != "}" && w[1] != "") print w[1]
            depth += gsub(/\{/, "{", line) - gsub(/\}/, "}", line) }' "$(dirname "${BASH_SOURCE[0]}")/coredns.yaml"
}
COREDNS_DIR="$CACHE_ROOT/k8s/coredns-${COREDNS_VERSION}-$(coredns_plugins | sha256sum | cut -c1-8)"
CONTAINERD_DIR="$CACHE_ROOT/containerd-${CONTAINERD_VERSION}"
IMAGES_DIR="$CACHE_ROOT/images"                                            # image tarballs by input hash
NODE_COMMANDS=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)
REALNODE_HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$REALNODE_HACK/../.." && pwd)"

log() { echo "[realnode $(date -u +%H:%M:%S)] $*" >&2; }

# timed NAME CMD...: run, then log how long it took (the CI log gives cold and warm times per step).
timed() {
  local name=$1 s; shift
  s=$(date +%s)
  "$@"
  log "$name took $(( $(date +%s) - s ))s"
}
