#!/usr/bin/env bash
# A real single-node Kubernetes cluster on a containerd that has thaw's
# runtime registered: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kube-proxy (iptables mode), all in the network
# namespace the node's containerd (and its CNI bridge) runs in, certificates,
# kubeconfigs and state in DIR. It runs in the foreground until SIGTERM or
# SIGINT (or until a component exits), then stops every component and
# leaves nothing: no process, mount, cgroup or log link of the cluster's,
# and the kernel settings the kubelet changes restored.
#
#   deploy/kubernetes/cluster.sh --netns NAME --containerd SOCKET --dir DIR [--pod-cidr CIDR]
#
#   --netns NAME        the network namespace (/run/netns/NAME) containerd
#                       runs in; the cluster's addresses exist only there
#   --containerd SOCKET containerd's socket, its CRI plugin with the thaw
#                       runtime (deploy/kubernetes/containerd-thaw.toml) and
#                       a CNI configuration
#   --dir DIR           an empty directory for the cluster (kept; its files
#                       and mounts are removed at the end)
#   --pod-cidr CIDR     the pods' addresses (the CNI configuration's
#                       subnet), for kube-proxy's masquerading; 10.88.0.0/16
#
# When every component is up and the node Ready, DIR/ready exists and
# DIR/kubectl runs kubectl against the cluster (in the namespace, as its
# admin). The node is labelled thaw.dev/runtime=true and the RuntimeClass
# thaw (runtimeclass.yaml) applied. Exit 0 after a signal, 1 when a
# component exited on its own, 2 on a usage or set-up error.
#
# The binaries are built once from the Go module proxy (tools.sh); etcd is
# Debian's etcd-server.
set -eEuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
say() { echo "cluster: $*" >&2; }
die() { say "$*"; exit 2; }
trap 'die "failed (line $LINENO): $BASH_COMMAND"' ERR

usage="usage: $0 --netns NAME --containerd SOCKET --dir DIR [--pod-cidr CIDR]"
netns= containerd= dir= pod_cidr=10.88.0.0/16
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$usage ($1 needs a value)"
    case $1 in
        --netns) netns=$2 ;;
        --containerd) containerd=$2 ;;
        --dir) dir=$2 ;;
        --pod-cidr) pod_cidr=$2 ;;
        *) die "$usage (unknown option $1)" ;;
    esac
    shift 2
done
[ -n "$netns" ] && [ -n "$containerd" ] && [ -n "$dir" ] || die "$usage"
[ -e "/run/netns/$netns" ] || die "no network namespace $netns (/run/netns/$netns)"
[ -S "$containerd" ] || die "no containerd socket at $containerd"
[ -d "$dir" ] || die "no directory $dir"
[ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
dir=$(cd "$dir" && pwd)
for p in etcd:etcd-server openssl:openssl python3:python3 nsenter:util-linux iptables:iptables ip:iproute2; do
    command -v "${p%%:*}" >/dev/null 2>&1 || die "${p%%:*} not found (Debian's ${p##*:}; scripts/setup.sh --tests installs it)"
done
for c in cpu cpuacct cpuset memory pids; do
    [ -d "/sys/fs/cgroup/$c" ] || die "the kubelet needs the cgroup v1 controller $c at /sys/fs/cgroup/$c"
done

# shellcheck source=tools.sh
. "$here/tools.sh"
k8s_ensure "${K8S_BINARIES[@]}"

# The node's address, on a veth pair inside the namespace with the default
# route through it (the kubelet refuses a loopback node address, and
# kube-proxy's rewritten Service addresses need a route to start from).
node_ip=10.201.0.1
node=thaw-node-$$
# the kubelet's pod cgroups go below this, in every controller
cgroup_root=/thaw-kube-$$
# what the kubelet sets at start (with protectKernelDefaults off)
kubelet_sysctls=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
    kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
saved_sysctls=()

in_ns() { nsenter --net="/run/netns/$netns" "$@"; }
kubectl() { in_ns "$k8s_bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" --cache-dir "$dir/kube-cache" "$@"; }

pids=()
names=()
kubelet_pid=
# start NAME COMMAND...: a component in the namespace, its log in DIR/NAME.log
start() {
    local name=$1
    shift
    # nsenter execs the component: $! is its pid
    nsenter --net="/run/netns/$netns" "$@" >"$dir/$name.log" 2>&1 &
    pids+=($!)
    names+=("$name")
}

cleanup() {
    local i p
    set +e
    rm -f "$dir/ready" "$dir/kubectl"
    # the workloads first, while the kubelet runs: it ends their pods and
    # removes their cgroups (a pod left running keeps its cgroup)
    if [ -n "$kubelet_pid" ] && kill -0 "$kubelet_pid" 2>/dev/null && up; then
        kubectl delete deployments,statefulsets,daemonsets,replicasets,jobs,pods --all \
            --all-namespaces --wait=true --timeout=60s >/dev/null 2>&1 \
            || say "the cluster's pods did not all end within 60 s"
    fi
    # the node agents first, then the control plane, in reverse order
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[$i]}" 2>/dev/null
        wait "${pids[$i]}" 2>/dev/null
    done
    for i in "${!saved_sysctls[@]}"; do
        echo "${saved_sysctls[$i]}" >"/proc/sys/${kubelet_sysctls[$i]}"
    done
    # the kubelet's mounts (its root bind-mounted shared, pods' volumes)
    awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r -n1 umount -l
    # its cgroups, deepest first (a pod still running keeps its own)
    for c in /sys/fs/cgroup/*/; do
        [ -d "$c${cgroup_root#/}" ] && find "$c${cgroup_root#/}" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    # the kubelet's links to its pods' logs
    for p in /var/log/containers/*.log; do
        [ -L "$p" ] && [[ $(readlink "$p") == "$dir/"* ]] && rm -f "$p"
    done
    in_ns ip link del thawnode0 2>/dev/null
    find "$dir" -mindepth 1 -delete 2>/dev/null
    k8s_cleanup
}
trap cleanup EXIT
trap 'exit 0' INT TERM

in_ns ip link add thawnode0 type veth peer name thawnode1
in_ns ip addr add "$node_ip/24" dev thawnode0
in_ns ip link set thawnode1 up
in_ns ip link set thawnode0 up
in_ns ip route add default dev thawnode0

# --- certificates and kubeconfigs ------------------------------------------
pki=$dir/pki
mkdir -p "$pki"
(
    k8s_ca "$pki" thaw-cluster-ca
    k8s_sa_keys "$pki"
    k8s_cert "$pki" apiserver /CN=kube-apiserver serverAuth \
        "IP:$node_ip,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default.svc"
    k8s_cert "$pki" kubelet-serving "/CN=$node" serverAuth "IP:$node_ip,DNS:$node"
    # the clients, as the default RBAC roles name them
    k8s_cert "$pki" admin /O=system:masters/CN=admin clientAuth
    k8s_cert "$pki" apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client clientAuth
    k8s_cert "$pki" controller-manager /CN=system:kube-controller-manager clientAuth
    k8s_cert "$pki" scheduler /CN=system:kube-scheduler clientAuth
    k8s_cert "$pki" kubelet "/O=system:nodes/CN=system:node:$node" clientAuth
    k8s_cert "$pki" kube-proxy /CN=system:kube-proxy clientAuth
) >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log" >&2; die "openssl failed"; }

# kubeconfig NAME: DIR/NAME.kubeconfig with the client certificate NAME
kubeconfig() {
    cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: thaw
  cluster:
    server: https://$node_ip:6443
    certificate-authority: $pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $pki/$1.crt
    client-key: $pki/$1.key
contexts:
- name: thaw
  context: {cluster: thaw, user: $1, namespace: default}
current-context: thaw
EOF
}
for k in admin controller-manager scheduler kubelet kube-proxy; do kubeconfig "$k"; done

# --- the control plane ------------------------------------------------------
start etcd etcd --name "$node" --data-dir "$dir/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$node=http://127.0.0.1:2380"
start kube-apiserver "$k8s_bin/kube-apiserver" --bind-address="$node_ip" --advertise-address="$node_ip" \
    --secure-port=6443 --etcd-servers=http://127.0.0.1:2379 \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$pki/ca.crt" \
    --authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/24 \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=true --cert-dir="$dir/apiserver-certs"

up() { kubectl get --raw /readyz >/dev/null 2>&1 && kubectl get namespace default >/dev/null 2>&1; }
# alive: every component still runs
alive() {
    local i
    for i in "${!pids[@]}"; do
        kill -0 "${pids[$i]}" 2>/dev/null || {
            tail -n 40 "$dir/${names[$i]}.log" >&2
            say "${names[$i]} exited (its log: above)"
            exit 1
        }
    done
}
# wait_for WHAT SECONDS COMMAND...: polls COMMAND until it succeeds
wait_for() {
    local what=$1 limit=$2 t=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        alive
        [ $((SECONDS - t)) -lt "$limit" ] || die "$what not after $limit s"
        sleep 0.5
    done
}
wait_for "kube-apiserver ready" 120 up

start kube-controller-manager "$k8s_bin/kube-controller-manager" --kubeconfig="$dir/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=true --service-cluster-ip-range=10.96.0.0/24
start kube-scheduler "$k8s_bin/kube-scheduler" --kubeconfig="$dir/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false

# --- the node ---------------------------------------------------------------
mkdir -p "$dir/kubelet" "$dir/pod-logs"
cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
containerRuntimeEndpoint: unix://$containerd
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
failSwapOn: false
failCgroupV1: false
podLogsDir: $dir/pod-logs
clusterDomain: cluster.local
# the test's images are imported, never pulled: none may be collected
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# a shared build machine's disk: evict for memory only
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
EOF
# the cgroup root must exist in every hierarchy; cpuset's needs its CPUs
for c in /sys/fs/cgroup/*/; do
    [ -e "${c}cgroup.procs" ] || continue
    mkdir "$c${cgroup_root#/}"
    for f in cpuset.cpus cpuset.mems; do
        [ -e "$c$f" ] && cat "$c$f" >"$c${cgroup_root#/}/$f"
    done
done
for s in "${kubelet_sysctls[@]}"; do saved_sysctls+=("$(cat "/proc/sys/$s")"); done
start kubelet "$k8s_bin/kubelet" --config="$dir/kubelet.yaml" --kubeconfig="$dir/kubelet.kubeconfig" \
    --root-dir="$dir/kubelet" --cert-dir="$dir/kubelet-certs" --hostname-override="$node" \
    --node-ip="$node_ip" --node-labels=thaw.dev/runtime=true
kubelet_pid=${pids[-1]}

cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $node
clusterCIDR: $pod_cidr
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$node_ip/32]
# the namespace may not change the host's conntrack table: leave it as it is
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
start kube-proxy "$k8s_bin/kube-proxy" --config="$dir/kube-proxy.yaml"

node_ready() {
    [ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
wait_for "the node $node Ready" 180 node_ready
kubectl apply -f "$here/runtimeclass.yaml" >/dev/null
# the namespace's default service account (the controller manager makes it)
wait_for "the default service account" 60 kubectl get serviceaccount default

cat >"$dir/kubectl" <<EOF
#!/bin/sh
exec nsenter --net=/run/netns/$netns $k8s_bin/kubectl --kubeconfig $dir/admin.kubeconfig --cache-dir $dir/kube-cache "\$@"
EOF
chmod +x "$dir/kubectl"
echo "$node" >"$dir/ready"
say "ready: node $node ($node_ip) Ready, Kubernetes $K8S_VERSION; kubectl: $dir/kubectl"

# until a signal, or a component exits
set +e
wait -n "${pids[@]}"
trap - ERR
alive
