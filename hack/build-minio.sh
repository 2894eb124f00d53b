#!/usr/bin/env bash
# Builds the MinIO server (a real S3-compatible object store) from the Go module proxy at a pinned
# version and caches it; prints the binary's path (instant once built). The S3 sink tests start it on a
# free loopback port (trawl.dev.s3_server). Cold build: about 25 min on two busy cores.
exec "$(dirname "${BASH_SOURCE[0]}")/build-go-tool.sh" minio
