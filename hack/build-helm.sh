#!/usr/bin/env bash
# Builds the helm CLI from the Go module proxy at a pinned version and caches it next to the
# Kubernetes test binaries. Prints the path of the helm binary; a second run is instant.
#
#   hack/build-helm.sh                      # build if missing, print .../helm-vX.Y.Z/helm
#   HELM_VERSION=v3.21.4 hack/build-helm.sh
#
# Why build instead of downloading: this environment reaches package registries only, and the
# Go module proxy serves helm.sh/helm/v3 as a module.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
DEST="$CACHE_ROOT/k8s/helm-${HELM_VERSION}"
BIN="$DEST/helm"

log() { echo "[build-helm] $*" >&2; }

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
find_go
log "using $("$GO" version)"

mkdir -p "$DEST"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
start=$(date +%s)

log "building helm $HELM_VERSION"
cd "$WORK"
cat > go.mod <<MOD
module trawl.dev/hack/helmbin

go 1.24

require helm.sh/helm/v3 $HELM_VERSION
MOD
cat > tools.go <<'GOF'
//go:build tools

package tools

import _ "helm.sh/helm/v3/cmd/helm"
GOF
"$GO" mod tidy
# Stamp the versions the way helm's Makefile does: `helm version` reports the release, and the
# default Kubernetes version of `helm template`/`helm lint` (Capabilities.KubeVersion) follows the
# client-go helm was built with instead of the bare-build fallback v1.20.0.
K8S_MODULES_VER="$("$GO" list -m -f '{{.Version}}' k8s.io/client-go)"   # v0.MINOR.PATCH
K8S_MINOR="$(echo "$K8S_MODULES_VER" | cut -d. -f2)"
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LDFLAGS+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=${K8S_MINOR}"
done
"$GO" build -trimpath -ldflags "$LDFLAGS" -o "$BIN.tmp" helm.sh/helm/v3/cmd/helm
mv "$BIN.tmp" "$BIN"
log "built in $(( $(date +%s) - start ))s: $("$BIN" version --short)"
echo "$BIN"
