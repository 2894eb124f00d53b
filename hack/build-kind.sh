#!/usr/bin/env bash
# Builds kind (Kubernetes in Docker) from the Go module proxy at a pinned version and caches it next
# to the Kubernetes test binaries. Prints the path of the kind binary; a second run is instant.
#
#   hack/build-kind.sh                      # build if missing, print .../kind-vX.Y.Z/kind
#   KIND_VERSION=v0.30.0 hack/build-kind.sh
#
# kind needs a Docker engine to create clusters; building it does not.
set -euo pipefail

KIND_VERSION="${KIND_VERSION:-v0.30.0}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
DEST="$CACHE_ROOT/k8s/kind-${KIND_VERSION}"
BIN="$DEST/kind"

log() { echo "[build-kind] $*" >&2; }

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
log "building kind $KIND_VERSION"
cd "$WORK"
cat > go.mod <<MOD
module trawl.dev/hack/kindbin

go 1.24

require sigs.k8s.io/kind $KIND_VERSION
MOD
cat > tools.go <<'GOF'
//go:build tools

package tools

import _ "sigs.k8s.io/kind"
GOF
"$GO" mod tidy
"$GO" build -trimpath -ldflags "-s -w" -o "$BIN.tmp" sigs.k8s.io/kind
mv "$BIN.tmp" "$BIN"
log "built in $(( $(date +%s) - start ))s: $("$BIN" version)"
echo "$BIN"
