#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy at pinned versions and caches
# them outside the work tree, the envtest way: point KUBEBUILDER_ASSETS at the printed folder.
#
#   hack/build-k8s-binaries.sh            # build if missing, print the assets folder
#   KUBE_VERSION=v1.35.4 ETCD_VERSION=v3.6.16 hack/build-k8s-binaries.sh
#
# Why build instead of downloading: this environment reaches package registries only, and the
# Go module proxy serves k8s.io/kubernetes and go.etcd.io/etcd as modules.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
ASSETS="$CACHE_ROOT/k8s/${KUBE_VERSION}-etcd-${ETCD_VERSION}"

log() { echo "[build-k8s-binaries] $*" >&2; }

if [[ -x "$ASSETS/kube-apiserver" && -x "$ASSETS/etcd" ]]; then
  echo "$ASSETS"
  exit 0
fi

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
find_go
log "using $("$GO" version)"

mkdir -p "$ASSETS"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

start=$(date +%s)

# etcd: a wrapper module requiring the server module; etcd's own go.mod uses relative
# replaces, which `go install pkg@version` refuses, so pin siblings explicitly.
log "building etcd $ETCD_VERSION"
mkdir -p "$WORK/etcd"
cd "$WORK/etcd"
cat > go.mod <<MOD
module trawl.dev/hack/etcdbin

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)
MOD
cat > tools.go <<'GOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GOF
"$GO" mod tidy >/dev/null 2>&1 || true
"$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
"$GO" build -trimpath -ldflags "-s -w" -o "$ASSETS/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"

# kube-apiserver: k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces
# them with ./staging paths; a wrapper module maps each to the published v0.X.Y tag.
log "building kube-apiserver $KUBE_VERSION"
mkdir -p "$WORK/kube"
cd "$WORK/kube"
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"
KMOD="$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
{
  echo "module trawl.dev/hack/kubebin"
  echo
  echo "go 1.24"
  echo
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  echo "replace ("
  grep -Eo '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$KMOD" \
    | awk -v v="$STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} > go.mod
cat > tools.go <<'GOF'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GOF
"$GO" mod tidy
MINOR="${KUBE_VERSION#v1.}"; MINOR="${MINOR%%.*}"
VERSION_FLAGS=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  VERSION_FLAGS+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
  VERSION_FLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
"$GO" build -trimpath -ldflags "-s -w $VERSION_FLAGS" -o "$ASSETS/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$ASSETS/kube-apiserver.tmp" "$ASSETS/kube-apiserver"

log "built in $(( $(date +%s) - start ))s into $ASSETS"
echo "$ASSETS"
