#!/usr/bin/env bash
# Debian packages the one-node cluster needs (root only): runc for the containers, the CNI plugins
# (bridge, host-local, portmap, loopback), iptables/conntrack/nftables for kube-proxy and teardown,
# debootstrap for the base images, docker.io (dockerd, never with iptables) to build the Dockerfile.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need=()
command -v runc >/dev/null || need+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v nft >/dev/null || need+=(nftables)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v dockerd >/dev/null || need+=(docker.io)
command -v openssl >/dev/null || need+=(openssl)
if ((${#need[@]})); then
  log "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Lock wait: other installs on the same machine (CI steps, other worktrees) may hold dpkg's lock.
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${need[@]}" >/dev/null
  # Debian may start dockerd/containerd on install; the node runs its own, on its own sockets.
  (systemctl stop docker containerd >/dev/null 2>&1 || service docker stop >/dev/null 2>&1 || true)
fi
