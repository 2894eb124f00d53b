#!/usr/bin/env bash
# A real one-node Kubernetes on this host, owned by one run folder $R:
#   containerd 2.x (hack/realnode/build.sh) with Debian's runc, etcd + kube-apiserver (the cluster tests'
#   cached build), kube-controller-manager, kube-scheduler, kubelet, kube-proxy (iptables mode), bridge CNI,
#   CoreDNS, and the images of hack/realnode/images.sh imported into containerd.
#
#   R=/tmp/x hack/realnode/node.sh up      # start; writes $R/env (ports, addresses) and $R/admin.kubeconfig
#   R=/tmp/x hack/realnode/node.sh down    # stop everything (by PID), unmount, delete cni0, chains, sysctls
#   R=/tmp/x hack/realnode/node.sh leftovers   # print what of the node is still on the host (empty: clean)
#
# Network: the API server and the kubelet listen on the bridge's own address (NODE_IP, on cni0, which this
# script creates) and loopback, every port is a free one picked now, and nothing is sent anywhere else:
# CoreDNS answers cluster names only (no upstream forwarding), pods get an empty resolv.conf otherwise.
# Needs root, cgroups and the packages of deps.sh. Pitfalls handled: see comments marked "why".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
R="${R:?set R to the run folder}"
R="$(mkdir -p "$R" && cd "$R" && pwd)"
NODE="${NODE_NAME:-trawl-realnode}"
POD_CIDR="${POD_CIDR:-10.244.0.0/24}"
NODE_IP="${NODE_IP:-10.244.0.1}"      # the bridge's own address: owned by this run
SVC_CIDR="${SVC_CIDR:-10.96.0.0/16}"
DNS_IP="${DNS_IP:-10.96.0.10}"
BRIDGE=cni0
CSOCK="$R/run/containerd/containerd.sock"
CTR=("$CONTAINERD_DIR/ctr" -a "$CSOCK" -n k8s.io)
KUBECTL="${KUBECTL:-$NODE_BIN/kubectl}"
PKI="$R/pki"
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Host paths the kubelet/CNI/containerd write to whatever their config says; removed on down if new.
HOST_PATHS=(/var/lib/cni /run/netns /var/run/netns /run/containerd /run/nri /var/log/pods /var/log/containers /var/lib/kubelet)

free_ports() { # free_ports N: N distinct free TCP ports on loopback
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

start() { # start NAME CMD...: in the background, log and pid file in $R
  local name=$1; shift
  nohup "$@" > "$R/log/$name.log" 2>&1 &
  echo $! > "$R/pids/$name.pid"
}

kubeconfig() { # kubeconfig NAME CERT
  cat > "$R/etc/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster: {certificate-authority: $PKI/ca.crt, server: "https://$NODE_IP:$API_PORT"}
users:
- name: $1
  user: {client-certificate: $PKI/$2.crt, client-key: $PKI/$2.key}
contexts:
- name: realnode
  context: {cluster: realnode, user: $1}
current-context: realnode
KC
}

pki() {
  mkdir -p "$PKI"
  (
    cd "$PKI"
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key
    openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=trawl-realnode-ca" -out ca.crt \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
    cert() { # cert NAME CN O EKU [SAN]
      local subj="/CN=$2"; [[ -n "$3" ]] && subj="/O=$3/CN=$2"
      openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
      openssl req -new -key "$1.key" -subj "$subj" -out "$1.csr"
      { echo "basicConstraints=critical,CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$4"; [[ -n "${5:-}" ]] && echo "subjectAltName=$5"; } > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver kube-apiserver "" serverAuth \
      "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP"
    cert admin admin system:masters clientAuth
    cert controller-manager system:kube-controller-manager "" clientAuth
    cert scheduler system:kube-scheduler "" clientAuth
    cert kube-proxy system:kube-proxy "" clientAuth
    cert kubelet "system:node:$NODE" system:nodes clientAuth
    cert kubelet-serving "$NODE" "" serverAuth "DNS:$NODE,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP"
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
    # The aggregation layer (APIService: Trawl's results API, as metrics-server): its own CA for the front
    # proxy's client certificate, which the API server presents to the aggregated API with X-Remote-* headers.
    openssl ecparam -name prime256v1 -genkey -noout -out front-proxy-ca.key
    openssl req -x509 -new -key front-proxy-ca.key -sha256 -days 30 -subj "/CN=trawl-realnode-front-proxy-ca" \
      -out front-proxy-ca.crt -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl ecparam -name prime256v1 -genkey -noout -out front-proxy-client.key
    openssl req -new -key front-proxy-client.key -subj "/CN=front-proxy-client" -out front-proxy-client.csr
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
      > front-proxy-client.ext
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
      -days 30 -sha256 -extfile front-proxy-client.ext -out front-proxy-client.crt 2>/dev/null
    rm -f front-proxy-client.csr front-proxy-client.ext
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  ) >/dev/null
}

kubepods_cgroups() { find /sys/fs/cgroup -maxdepth 2 -name kubepods -type d 2>/dev/null | sort; }

network_ours() { # this run marked the network (net_up), and no other node holds the mark now
  # why: after this run was killed, another node may have removed its bridge and made its own.
  [[ -f "$R/pids/netmark.pid" ]] || return 1
  kill -0 "$(cat "$R/pids/netmark.pid")" 2>/dev/null || ! node_marked
}
owns_host() { [[ -f "$R/sysctl.before" ]]; }   # set by record_host_state, once the bridge was free

record_host_state() {
  # What was there before, so `down` restores exactly that.
  for k in "${SYSCTLS[@]}"; do v="$(sysctl -n "$k" 2>/dev/null)" && echo "$k=$v"; done > "$R/sysctl.before"
  nft list tables 2>/dev/null | sort > "$R/nft.before" || : > "$R/nft.before"
  for p in "${HOST_PATHS[@]}"; do [[ -e "$p" ]] && echo "$p"; done > "$R/paths.before" || true
  kubepods_cgroups > "$R/cgroups.before"
}

# why: the bridge is a fixed name in the host's network namespace, which a run may share with runs in other
# containers (a CI job beside a developer's shell), and a run killed with its container leaves the bridge
# behind with nothing to remove it. A live node says so by an abstract socket, which lives in the network
# namespace (like the bridge) and dies with the process that holds it (unlike the bridge): from net_up to
# the end of down.
MARK="trawl-realnode-$BRIDGE"
node_marked() { ss -Hlx 2>/dev/null | grep -qF "@$MARK "; }

bridge_free() { # wait (bounded) for another live node's bridge to go; remove one whose node was killed
  local waited=0 limit="${REALNODE_BUSY_WAIT:-600}"
  while ip link show "$BRIDGE" >/dev/null 2>&1; do
    if ! node_marked; then
      log "$BRIDGE exists but no node holds it (its run was killed): removing what it left in the network"
      net_down
      return 0
    fi
    if (( waited >= limit )); then
      echo "$BRIDGE belongs to another node that is still up after ${limit}s (down it first)" >&2
      return 3
    fi
    (( waited == 0 )) && log "another node is up (its $BRIDGE is held): waiting up to ${limit}s for it to go"
    sleep 2; waited=$(( waited + 2 ))
  done
}

net_down() { # the node's network on the host: pod veths, the bridge, CNI namespaces, KUBE-/CNI- chains
  local veth
  rm -f /run/netns/cni-* 2>/dev/null || true
  for veth in $(ip -o link show type veth 2>/dev/null | awk -F': ' '/master '"$BRIDGE"' /{print $2}' | cut -d@ -f1); do
    ip link delete "$veth" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE"; fi
  # Chains of the kubelet (KUBE-*), kube-proxy (KUBE-*) and bridge CNI (CNI-*) go; everything else stays
  # as it is (other programs on this host may change their rules meanwhile, so no blind restore).
  local save
  for save in iptables-save ip6tables-save; do
    command -v "$save" >/dev/null || continue
    local restore="${save%-save}-restore"
    "$save" | grep -vE 'KUBE-|CNI-|cali-' | "$restore" 2>/dev/null || true
  done
}

net_up() {
  # The node's mark first: from here on the bridge is this node's (see bridge_free).
  start netmark python3 -c 'import socket, signal, sys
s = socket.socket(socket.AF_UNIX)
s.bind("\0" + sys.argv[1])
s.listen()
print("bound", flush=True)
signal.pause()' "$MARK"
  # why: the mark must be this run's own. Another node that took the bridge since bridge_free holds the
  # name, so this run's holder fails to bind and exits; its pid file goes (stop), and `down` then leaves the
  # network alone (it only removes a network this run marked).
  local pid; pid="$(cat "$R/pids/netmark.pid")"
  for _ in $(seq 300); do grep -q bound "$R/log/netmark.log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if ! grep -q bound "$R/log/netmark.log" || ! kill -0 "$pid" 2>/dev/null; then
    stop netmark
    echo "the node mark @$MARK is not this run's (another node took $BRIDGE meanwhile?)" >&2
    return 1
  fi
  # why: the bridge's address is the node address, so it must exist before the API server binds to it.
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  modprobe br_netfilter 2>/dev/null || true
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  mkdir -p "$R/cni/net.d"
  cat > "$R/cni/net.d/10-bridge.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "trawl-realnode",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$R/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
  : > "$R/etc/resolv.conf"   # why: pods must not learn (and query) the host's outside resolvers
}

containerd_up() {
  "$CONTAINERD_DIR/containerd" config default > "$R/etc/containerd.toml"
  python3 - "$R" <<'PY'
import sys
r = sys.argv[1]
path = f"{r}/etc/containerd.toml"
s = open(path).read()
subs = {
    "root = '/var/lib/containerd'": f"root = '{r}/containerd/root'",
    "state = '/run/containerd'": f"state = '{r}/run/containerd-state'",
    "address = '/run/containerd/containerd.sock'": f"address = '{r}/run/containerd/containerd.sock'",
    "address = '/run/containerd/containerd.sock.ttrpc'": f"address = '{r}/run/containerd/containerd.sock.ttrpc'",
    "sandbox = 'registry.k8s.io/pause:3.10.1'": "sandbox = 'localhost/pause:local'",
    "sandbox = 'registry.k8s.io/pause:3.10.2'": "sandbox = 'localhost/pause:local'",
    "bin_dirs = ['/opt/cni/bin']": "bin_dirs = ['/usr/lib/cni']",
    "socket_path = '/var/run/nri/nri.sock'": f"socket_path = '{r}/run/nri/nri.sock'",
    "imports = ['/etc/containerd/conf.d/*.toml']": "imports = []",  # the host's containerd config is not ours
    "conf_dir = '/etc/cni/net.d'": f"conf_dir = '{r}/cni/net.d'",
    # why: root here lacks CAP_SYS_RESOURCE, so runc cannot set the kubelet's negative oom_score_adj
    # (sandbox -998: "can't get final child's PID from pipe: EOF"); clamp it to containerd's own.
    "restrict_oom_score_adj = false": "restrict_oom_score_adj = true",
}
for old, new in subs.items():
    s = s.replace(old, new)
for must in ("localhost/pause:local", "restrict_oom_score_adj = true", f"{r}/cni/net.d", f"{r}/containerd/root"):
    assert must in s, f"containerd config patch failed: {must} missing (containerd changed its defaults?)"
open(path, "w").write(s)
PY
  mkdir -p "$R/run/containerd"
  PATH="$CONTAINERD_DIR:$PATH" start containerd "$CONTAINERD_DIR/containerd" --config "$R/etc/containerd.toml"
  for _ in $(seq 100); do [[ -S "$CSOCK" ]] && "${CTR[@]}" version >/dev/null 2>&1 && break; sleep 0.2; done
  # Imports unpack into overlay snapshots: tens of seconds for the big images, so all at once.
  local name tar pids=()
  while read -r name tar; do
    "${CTR[@]}" images import "$tar" >/dev/null 2>"$R/log/import-$name.log" & pids+=($!)
  done < "$R/images.list"
  for name in "${pids[@]}"; do wait "$name" || { cat "$R"/log/import-*.log; return 1; }; done
}

control_plane_up() {
  start etcd "$ASSETS/etcd" --name=realnode --data-dir="$R/etcd" --unsafe-no-fsync \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="realnode=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls="http://127.0.0.1:$ETCD_METRICS_PORT"
  start apiserver "$ASSETS/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$NODE_IP" --secure-port="$API_PORT" --advertise-address="$NODE_IP" \
    --service-cluster-ip-range="$SVC_CIDR" --allow-privileged=true \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true
  kubeconfig admin admin
  cp "$R/etc/admin.kubeconfig" "$R/admin.kubeconfig"
  for _ in $(seq 240); do
    "$KUBECTL" --kubeconfig "$R/admin.kubeconfig" get --raw=/readyz >/dev/null 2>&1 && break
    kill -0 "$(cat "$R/pids/apiserver.pid")" || { tail -20 "$R/log/apiserver.log"; return 1; }
    sleep 0.5
  done
  kubeconfig controller-manager controller-manager
  start controller-manager "$NODE_BIN/kube-controller-manager" --kubeconfig="$R/etc/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$R/etc/controller-manager.kubeconfig" --authorization-kubeconfig="$R/etc/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SVC_CIDR" --controllers='*,-cloud-node-lifecycle'
  kubeconfig scheduler scheduler
  start scheduler "$NODE_BIN/kube-scheduler" --kubeconfig="$R/etc/scheduler.kubeconfig" \
    --authentication-kubeconfig="$R/etc/scheduler.kubeconfig" --authorization-kubeconfig="$R/etc/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false
}

node_up() {
  kubeconfig kubelet kubelet
  # why: kubelet >= 1.35 refuses cgroup v1 unless failCgroupV1 is false; cgroupfs, as no systemd runs here.
  cat > "$R/etc/kubelet.yaml" <<KL
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CSOCK
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: $R/etc/resolv.conf
failSwapOn: false
podCIDR: $POD_CIDR
podLogsDir: $R/pod-logs
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
KL
  start kubelet "$NODE_BIN/kubelet" --config="$R/etc/kubelet.yaml" --kubeconfig="$R/etc/kubelet.kubeconfig" \
    --root-dir="$R/kubelet" --hostname-override="$NODE" --node-ip="$NODE_IP" --v=1
  kubeconfig kube-proxy kube-proxy
  cat > "$R/etc/kube-proxy.yaml" <<KP
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
clientConnection: {kubeconfig: $R/etc/kube-proxy.kubeconfig}
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: [$NODE_IP/32]
conntrack: {maxPerCore: 0}
KP
  start kube-proxy "$NODE_BIN/kube-proxy" --config="$R/etc/kube-proxy.yaml"
}

dns_up() {
  local K=("$KUBECTL" --kubeconfig "$R/admin.kubeconfig")
  for _ in $(seq 240); do "${K[@]}" get node "$NODE" >/dev/null 2>&1 && break; sleep 0.5; done
  "${K[@]}" wait --for=condition=Ready "node/$NODE" --timeout=180s >/dev/null
  sed "s/__DNS_IP__/$DNS_IP/" "$REALNODE_HACK/coredns.yaml" | "${K[@]}" apply -f - >/dev/null
  "${K[@]}" -n kube-system rollout status deploy/coredns --timeout=180s >/dev/null
}

up() {
  [[ $EUID -eq 0 ]] || { echo "not root: a real node needs root (network, mounts, cgroups)" >&2; return 3; }
  [[ -d /sys/fs/cgroup/memory || -f /sys/fs/cgroup/cgroup.controllers ]] || { echo "no cgroup file system" >&2; return 3; }
  mkdir -p "$R"/{log,pids,etc,run}
  bridge_free || return 3
  "$REALNODE_HACK/images.sh" > "$R/images.list"
  record_host_state
  timed "pki" pki
  timed "network" net_up
  timed "containerd (+image import)" containerd_up
  # Ports picked just before the components bind them (a port picked a minute earlier may be taken by
  # then on a busy machine).
  read -r ETCD_PORT ETCD_PEER_PORT ETCD_METRICS_PORT API_PORT KCM_PORT SCHED_PORT KUBELET_PORT \
    KUBELET_HEALTHZ_PORT PROXY_HEALTHZ_PORT PROXY_METRICS_PORT <<< "$(free_ports 10)"
  cat > "$R/env" <<ENV
NODE=$NODE
NODE_IP=$NODE_IP
API_PORT=$API_PORT
KUBELET_PORT=$KUBELET_PORT
KUBECONFIG=$R/admin.kubeconfig
KUBECTL=$KUBECTL
CTR=$CONTAINERD_DIR/ctr
CONTAINERD_SOCK=$CSOCK
ENV
  timed "control plane" control_plane_up
  node_up
  timed "node Ready + CoreDNS" dns_up
  all_running
}

all_running() { # every component still running (one that lost a port race exits at once)
  local c
  for c in containerd etcd apiserver controller-manager scheduler kubelet kube-proxy; do
    kill -0 "$(cat "$R/pids/$c.pid")" 2>/dev/null || { echo "$c exited:" >&2; tail -5 "$R/log/$c.log" >&2; return 1; }
  done
}

stop() { # stop NAME: SIGTERM by pid file, bounded wait, SIGKILL
  local f="$R/pids/$1.pid" pid
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; for _ in $(seq 75); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  # Best effort, every step: one failing cleanup must not skip the others.
  set +e
  [[ -d "$R" ]] || return 0
  # A run refused before it recorded the host's state (another node was up) started nothing and owns
  # nothing on the host: the bridge, CNI namespaces, chains, cgroups and host paths there are another
  # node's, and removing them would break it.
  owns_host || { log "this run never took the host: nothing of it to remove"; return 0; }
  # The node network (bridge, CNI namespaces) only if it is still this run's: see network_ours.
  local net=" ($R)"
  network_ours && net=" ($R|/run/netns/cni-|/var/run/netns/cni-)"
  local K=("$KUBECTL" --kubeconfig "$R/admin.kubeconfig" --request-timeout=10s)
  # Pods first, while the kubelet still runs and can stop them (and unmount their volumes) cleanly.
  if [[ -f "$R/pids/kubelet.pid" && -f "$R/admin.kubeconfig" ]] && "${K[@]}" get --raw=/readyz >/dev/null 2>&1; then
    local ns
    for ns in $("${K[@]}" get ns -o name 2>/dev/null | cut -d/ -f2); do
      "${K[@]}" -n "$ns" delete deploy,sts,ds,rs,job,pod --all --wait=false --grace-period=5 >/dev/null 2>&1 || true
    done
    for _ in $(seq 60); do [[ -z "$("${K[@]}" get pods -A -o name 2>/dev/null)" ]] && break; sleep 1; done
  fi
  local c
  for c in kube-proxy kubelet scheduler controller-manager apiserver etcd; do stop "$c"; done
  if [[ -S "$CSOCK" ]]; then
    local t
    for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    for _ in $(seq 25); do [[ -z "$("${CTR[@]}" tasks ls -q 2>/dev/null)" ]] && break; sleep 0.2; done
    for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for t in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$t" >/dev/null 2>&1 || true; done
  fi
  stop containerd
  # Containers that outlived containerd (a shim killed, containerd gone first): runc still knows them.
  local id bundle
  while read -r id _ _ bundle _; do
    [[ "$bundle" == "$R"/* ]] || continue
    runc --root /run/containerd/runc/k8s.io kill "$id" KILL 2>/dev/null
    runc --root /run/containerd/runc/k8s.io delete -f "$id" 2>/dev/null
  done < <(runc --root /run/containerd/runc/k8s.io list 2>/dev/null | tail -n +2)
  # Shims outlive containerd only while their container runs; the containers are gone, so end them by PID.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CSOCK" || true); do kill "$pid" 2>/dev/null || true; done
  # Mounts under $R (volumes, overlay snapshots, shm) and the CNI network namespaces, deepest first.
  grep -E "$net" /proc/mounts | awk '{print $2}' | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  [[ "$net" == *cni-* ]] && net_down
  stop netmark   # the bridge is gone: nothing of this node is left in the network namespace to guard
  if command -v nft >/dev/null; then
    local table
    nft list tables 2>/dev/null | sort | comm -13 "$R/nft.before" - | while read -r _ fam name; do
      # A table the node created: delete it if nothing else put rules in it meanwhile.
      if ! nft list table "$fam" "$name" 2>/dev/null | grep -qE '^\s+(ip|tcp|udp|meta|ct|iif|oif|counter|jump|accept|drop|masquerade)'; then
        nft delete table "$fam" "$name" 2>/dev/null || true
      fi
    done
  fi
  [[ -f "$R/sysctl.before" ]] && while IFS= read -r kv; do sysctl -qw "$kv" 2>/dev/null || true; done < "$R/sysctl.before"
  # The kubelet's cgroups (cgroupfs driver): empty once the pods are gone; rmdir deepest first.
  local cg
  for cg in $(kubepods_cgroups); do
    grep -qxF "$cg" "$R/cgroups.before" 2>/dev/null && continue
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  # Host folders the components created although configured elsewhere (only if they were not there before).
  local p
  # The kubelet links every container's log into /var/log/containers (a fixed path): ours point into $R.
  [[ -d /var/log/containers ]] && find /var/log/containers -lname "$R/*" -delete 2>/dev/null
  for p in "${HOST_PATHS[@]}"; do
    [[ -e "$p" ]] || continue
    grep -qxF "$p" "$R/paths.before" 2>/dev/null && continue
    find "$p" -xtype l -delete 2>/dev/null || true     # dangling links into $R (pod log links)
    find "$p" -type s -delete 2>/dev/null || true      # the kubelet's device-plugin socket (fixed path)
    [[ "$p" == /var/lib/cni ]] && rm -rf /var/lib/cni/results   # libcni's result cache (fixed path)
    find "$p" -depth -type d -empty -delete 2>/dev/null || true
  done
  return 0
}

leftovers() {
  # Everything of the node that could outlive it; prints one line per leftover.
  set +e
  local f
  for f in "$R"/pids/*.pid; do [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null && echo "process $(basename "$f" .pid) $(cat "$f")"; done
  pgrep -af "(containerd-shim-runc-v2 .*-address $CSOCK|$R/)" | grep -v pgrep | sed 's/^/process /' || true
  owns_host || return 0   # what is on the host is another node's (see down)
  grep -E " ($R|/run/netns/cni-|/var/run/netns/cni-)" /proc/mounts | awk '{print "mount " $2}'
  ip link show "$BRIDGE" >/dev/null 2>&1 && echo "link $BRIDGE"
  # The bridge plugin's host-side veths are veth + 8 hex digits.
  ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^veth[0-9a-f]{8}@' | sed 's/^/link /' || true
  for f in iptables-save ip6tables-save; do command -v "$f" >/dev/null && "$f" 2>/dev/null | grep -E '^:(KUBE-|CNI-)' | sed "s/^/$f chain /"; done
  if command -v nft >/dev/null && [[ -f "$R/nft.before" ]]; then nft list tables 2>/dev/null | sort | comm -13 "$R/nft.before" - | sed 's/^/nft /'; fi
  kubepods_cgroups | comm -13 "$R/cgroups.before" - 2>/dev/null | sed 's/^/cgroup /'
  local p
  for p in "${HOST_PATHS[@]}"; do [[ -e "$p" ]] && ! grep -qxF "$p" "$R/paths.before" 2>/dev/null && echo "path $p"; done
  if [[ -f "$R/sysctl.before" ]]; then
    local kv
    while IFS= read -r kv; do [[ "$(sysctl -n "${kv%%=*}" 2>/dev/null)" == "${kv#*=}" ]] || echo "sysctl ${kv%%=*} is $(sysctl -n "${kv%%=*}") (was ${kv#*=})"; done < "$R/sysctl.before"
  fi
  return 0
}

# Sourced (to debug one step at a time): define the functions only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0
case "${1:-}" in
  up) timed "node up" up ;;
  down) timed "node down" down ;;
  leftovers) leftovers ;;
  *) echo "usage: R=DIR $0 up|down|leftovers" >&2; exit 2 ;;
esac
