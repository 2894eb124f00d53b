#!/usr/bin/env bash
# Builds the MinIO server (a real S3-compatible object store) from the Go module proxy at a pinned
# version and caches it. Prints the path of the binary; a second run is instant. The S3 sink tests
# start it on a free loopback port (trawl.dev.s3_server).
#
#   hack/build-minio.sh                 # build if missing, print .../minio-<version>/minio
#
# Why build instead of downloading: this environment reaches package registries only, and the Go
# module proxy serves github.com/minio/minio as a module. Cold build: see docs (about 25-30 min on
# two busy cores, most of it compiling; seconds afterwards).
set -euo pipefail

MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
DEST="$CACHE_ROOT/s3/minio-${MINIO_VERSION}"
BIN="$DEST/minio"

log() { echo "[build-minio] $*" >&2; }

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
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
start=$(date +%s)
log "building minio $MINIO_VERSION"
GOBIN="$WORK" "$GO" install -trimpath -ldflags "-s -w" "github.com/minio/minio@${MINIO_VERSION}"
mv "$WORK/minio" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
log "built in $(( $(date +%s) - start ))s"
echo "$BIN"
