#!/usr/bin/env bash
# Builds what a real one-node Kubernetes needs and the project does not ship, from the Go module proxy,
# into ~/.cache/trawl (keyed by version; a second run returns at once):
#   node       kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl at the API server's
#              Kubernetes version, in ONE `go build` so the shared packages compile once
#   containerd containerd, containerd-shim-runc-v2, ctr (2.x; Debian's runc runs the containers)
#   coredns    the cluster DNS server, with only the plugins its Corefile (coredns.yaml) uses
#   pause      the sandbox image's program (pause.go beside this script)
#
#   hack/realnode/build.sh [all|node|containerd|coredns|pause]...
#   hack/realnode/build.sh mod-download       # fetch modules only (network, little CPU)
# kube-apiserver and etcd come from hack/build-k8s-binaries.sh (the cluster tests' build).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
find_go
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
WORK_ROOT="$CACHE_ROOT/build"

# The wrapper module of hack/build-k8s-binaries.sh: k8s.io/kubernetes requires its staging modules at
# v0.0.0 with ./staging replaces; map each to the published v0.X.Y tag.
node_module() {
  local work="$WORK_ROOT/kubenode-$KUBE_VERSION"
  mkdir -p "$work"; cd "$work"
  [[ -f go.sum && -f tools.go ]] && return 0
  local staging="v0.${KUBE_VERSION#v1.}" kmod
  kmod="$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  {
    echo "module trawl.dev/hack/kubenode"; echo; echo "go 1.24"; echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"; echo
    echo "replace ("
    grep -Eo '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$kmod" \
      | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > go.mod
  { echo "//go:build tools"; echo; echo "package tools"; echo
    for c in "${NODE_COMMANDS[@]}"; do echo "import _ \"k8s.io/kubernetes/cmd/$c\""; done; } > tools.go.tmp
  mv tools.go.tmp tools.go
  "$GO" mod tidy
}

build_node() {
  local missing=0 c
  for c in "${NODE_COMMANDS[@]}"; do [[ -x "$NODE_BIN/$c" ]] || missing=1; done
  ((missing)) || return 0
  log "building ${NODE_COMMANDS[*]} $KUBE_VERSION into $NODE_BIN"
  node_module
  local minor="${KUBE_VERSION#v1.}" flags="" pkg pkgs=() out="$NODE_BIN.tmp"
  minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  for c in "${NODE_COMMANDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  rm -rf "$out"; mkdir -p "$out"
  # Several main packages with -o DIR: one build graph, each shared package compiled once.
  "$GO" build -trimpath -ldflags "-s -w $flags" -o "$out/" "${pkgs[@]}"
  rm -rf "$NODE_BIN"; mv "$out" "$NODE_BIN"
}

build_containerd() {
  [[ -x "$CONTAINERD_DIR/containerd" && -x "$CONTAINERD_DIR/ctr" && -x "$CONTAINERD_DIR/containerd-shim-runc-v2" ]] && return 0
  log "building containerd $CONTAINERD_VERSION into $CONTAINERD_DIR"
  local m=github.com/containerd/containerd/v2/cmd tmp="$CONTAINERD_DIR.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp"
  # No cgo: the btrfs/devmapper/zfs snapshotters need C headers; overlayfs is all the node uses.
  GOFLAGS=-buildvcs=false GOBIN="$tmp" "$GO" install -trimpath -tags 'no_btrfs no_devmapper no_zfs' -ldflags '-s -w' \
    "$m/containerd@$CONTAINERD_VERSION" "$m/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$m/ctr@$CONTAINERD_VERSION"
  rm -rf "$CONTAINERD_DIR"; mv "$tmp" "$CONTAINERD_DIR"
}

build_coredns() {
  [[ -x "$COREDNS_DIR/coredns" ]] && return 0
  local plugins; mapfile -t plugins < <(coredns_plugins)
  log "building coredns $COREDNS_VERSION with the Corefile's plugins (${plugins[*]}) into $COREDNS_DIR"
  # Only those plugins, not `go install github.com/coredns/coredns`: the full set compiles the AWS,
  # Azure, Google Cloud, etcd, tracing and gRPC SDKs too, most of the cold build time. A main package
  # of our own imports them and sets their order (plugin.cfg's, which the server must keep), as
  # CoreDNS documents for custom builds.
  local work="$WORK_ROOT/coredns-$COREDNS_VERSION"
  rm -rf "$work"; mkdir -p "$work"
  (
    cd "$work"
    printf 'module trawl.dev/hack/coredns\n\ngo 1.25.0\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" > go.mod
    local src; src="$("$GO" mod download -json "github.com/coredns/coredns@$COREDNS_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    python3 - "$src/plugin.cfg" "${plugins[@]}" > main.go <<'PY'
import sys
cfg, wanted = sys.argv[1], sys.argv[2:]
order = []
for line in open(cfg):
    line = line.strip()
    if line and not line.startswith("#"):
        name, pkg = line.split(":", 1)
        if name in wanted:
            order.append((name, pkg if "/" in pkg else f"github.com/coredns/coredns/plugin/{pkg}"))
unknown = set(wanted) - {n for n, _ in order}
if unknown:
    sys.exit(f"coredns.yaml's Corefile uses plugins CoreDNS does not have: {sorted(unknown)}")
print("// Generated by hack/realnode/build.sh: CoreDNS with the plugins of coredns.yaml's Corefile only.")
print("package main\n\nimport (")
print('\t"github.com/coredns/coredns/core/dnsserver"\n\t"github.com/coredns/coredns/coremain"')
for _, pkg in order:
    print(f'\t_ "{pkg}"')
print(")\n\nfunc init() {\n\tdnsserver.Directives = []string{" + ", ".join(f'"{n}"' for n, _ in order) + "}\n}")
print("\nfunc main() { coremain.Run() }")
PY
    "$GO" mod tidy
    rm -rf "$COREDNS_DIR.tmp"; mkdir -p "$COREDNS_DIR.tmp"
    "$GO" build -trimpath -ldflags '-s -w' -o "$COREDNS_DIR.tmp/coredns" .
  )
  rm -rf "$COREDNS_DIR"; mv "$COREDNS_DIR.tmp" "$COREDNS_DIR"
}

# Keyed by the source's hash: a changed pause.go builds a new one.
pause_bin() { echo "$CACHE_ROOT/k8s/pause-$(sha256sum "$REALNODE_HACK/pause.go" | cut -c1-12)/pause"; }
build_pause() {
  local bin; bin="$(pause_bin)"
  [[ -x "$bin" ]] && return 0
  local work="$WORK_ROOT/pause"
  mkdir -p "$work" "$(dirname "$bin")"
  cp "$REALNODE_HACK/pause.go" "$work/main.go"
  printf 'module trawl.dev/hack/pause\n\ngo 1.22\n' > "$work/go.mod"
  (cd "$work" && "$GO" build -trimpath -ldflags '-s -w' -o "$bin" .)
}

mod_download() {
  (node_module && "$GO" mod download)
  GOFLAGS=-mod=mod "$GO" mod download "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null 2>&1 || true
  GOFLAGS=-mod=mod "$GO" mod download "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" >/dev/null 2>&1 || true
}

for step in "${@:-all}"; do
  case "$step" in
    all) timed pause build_pause; timed containerd build_containerd; timed coredns build_coredns; timed node build_node ;;
    node|containerd|coredns|pause) timed "$step" "build_$step" ;;
    mod-download) timed mod-download mod_download ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
