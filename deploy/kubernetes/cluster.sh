#!/usr/bin/env bash
# A real Kubernetes cluster of one or more nodes on containerds that have
# thaw's runtime registered: etcd, kube-apiserver, kube-controller-manager
# and kube-scheduler in the network namespace of the first node's
# containerd, and on every node a kubelet and a kube-proxy (iptables mode)
# in its containerd's namespace (where its CNI bridge is); certificates,
# kubeconfigs and state in DIR. It runs in the foreground until SIGTERM or
# SIGINT (or until a component exits), then stops every component and
# leaves nothing: no process, mount, cgroup or log link of the cluster's,
# and the kernel settings the kubelet changes restored.
#
#   deploy/kubernetes/cluster.sh --netns NAME --containerd SOCKET --dir DIR [--pod-cidr CIDR]
#       [--thaw-socket SOCKET] [--node NETNS,CONTAINERD,POD_CIDR[,THAW_SOCKET]]...
#
#   --netns NAME        the network namespace (/run/netns/NAME) containerd
#                       runs in; the cluster's addresses exist only there
#   --containerd SOCKET containerd's socket, its CRI plugin with the thaw
#                       runtime (deploy/kubernetes/containerd-thaw.toml) and
#                       a CNI configuration (each pod's default route its
#                       bridge, or pods answer no other node)
#   --dir DIR           an empty directory for the cluster (kept; its files
#                       and mounts are removed at the end)
#   --pod-cidr CIDR     every node's pods' addresses (each node's CNI
#                       subnet lies in it), for kube-proxy's masquerading;
#                       10.88.0.0/16
#   --thaw-socket SOCKET the first node's thaw daemon: snapshot-labels.py
#                       keeps the node's snapshot.thaw.dev/ labels current
#   --node NETNS,CONTAINERD,POD_CIDR[,THAW_SOCKET]
#                       one more node: its containerd's namespace and socket,
#                       its CNI subnet (routed to it from the first node)
#                       and its daemon, as above
#
# Node N (1, 2, ...) is thaw-node-PID (the first) or thaw-node-PID-N at
# 10.201.0.N: the first node's address is on a veth inside its namespace,
# and each other node's namespace is joined to the first's by a veth pair of
# its own (routes to its address and pod subnet through it; its default
# route back).
# When every component is up and every node Ready, DIR/ready exists (the
# nodes' names, a line each) and DIR/kubectl runs kubectl against the
# cluster (in the namespace, as its admin). Each node is labelled
# thaw.dev/runtime=true and the RuntimeClass
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

usage="usage: $0 --netns NAME --containerd SOCKET --dir DIR [--pod-cidr CIDR] [--thaw-socket SOCKET] [--node NETNS,CONTAINERD,POD_CIDR[,THAW_SOCKET]]..."
netns= containerd= dir= pod_cidr=10.88.0.0/16 thaw_socket=
# the nodes after the first, as given
more_nodes=()
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$usage ($1 needs a value)"
    case $1 in
        --netns) netns=$2 ;;
        --containerd) containerd=$2 ;;
        --dir) dir=$2 ;;
        --pod-cidr) pod_cidr=$2 ;;
        --thaw-socket) thaw_socket=$2 ;;
        --node) more_nodes+=("$2") ;;
        *) die "$usage (unknown option $1)" ;;
    esac
    shift 2
done
[ -n "$netns" ] && [ -n "$containerd" ] && [ -n "$dir" ] || die "$usage"
# each node: its network namespace, containerd socket, pod subnet (routed
# to it; the first node's needs no route) and thaw socket (may be empty)
node_netns=("$netns") node_containerd=("$containerd") node_cidr=("") node_thaw=("$thaw_socket")
for spec in "${more_nodes[@]}"; do
    IFS=, read -r n_ns n_sock n_cidr n_thaw n_rest <<<"$spec"
    [ -n "$n_ns" ] && [ -n "$n_sock" ] && [ -n "$n_cidr" ] && [ -z "$n_rest" ] \
        || die "--node $spec: expected NETNS,CONTAINERD,POD_CIDR[,THAW_SOCKET]"
    node_netns+=("$n_ns") node_containerd+=("$n_sock") node_cidr+=("$n_cidr") node_thaw+=("$n_thaw")
done
[ ${#node_netns[@]} -le 200 ] || die "at most 200 nodes"
for i in "${!node_netns[@]}"; do
    [ -e "/run/netns/${node_netns[$i]}" ] || die "no network namespace ${node_netns[$i]} (/run/netns/${node_netns[$i]})"
    [ -S "${node_containerd[$i]}" ] || die "no containerd socket at ${node_containerd[$i]}"
    [ -z "${node_thaw[$i]}" ] || [ -S "${node_thaw[$i]}" ] || die "no thaw daemon socket at ${node_thaw[$i]}"
    [ "$i" -eq 0 ] || [ "${node_netns[$i]}" != "$netns" ] || die "node $((i + 1)) shares the first node's network namespace $netns"
done
[ -d "$dir" ] || die "no directory $dir"
[ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
dir=$(cd "$dir" && pwd)
for p in etcd:etcd-server openssl:openssl python3:python3 nsenter:util-linux flock:util-linux iptables:iptables ip:iproute2; do
    command -v "${p%%:*}" >/dev/null 2>&1 || die "${p%%:*} not found (Debian's ${p##*:}; scripts/setup.sh --tests installs it)"
done
for c in cpu cpuacct cpuset memory pids; do
    [ -d "/sys/fs/cgroup/$c" ] || die "the kubelet needs the cgroup v1 controller $c at /sys/fs/cgroup/$c"
done

# shellcheck source=tools.sh
. "$here/tools.sh"
k8s_ensure "${K8S_BINARIES[@]}"

# The first node's address, on a veth pair inside its namespace with the
# default route through it (the kubelet refuses a loopback node address,
# and kube-proxy's rewritten Service addresses need a route to start from).
node_ip=10.201.0.1
node_ips=() node_names=() cgroup_roots=()
for i in "${!node_netns[@]}"; do
    sfx=$([ "$i" -eq 0 ] || echo "-$((i + 1))")
    node_ips+=("10.201.0.$((i + 1))")
    node_names+=("thaw-node-$$$sfx")
    # the node's kubelet's pod cgroups go below this, in every controller
    cgroup_roots+=("/thaw-kube-$$$sfx")
done
node=${node_names[0]}
# what the kubelet sets at start (with protectKernelDefaults off)
kubelet_sysctls=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
    kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
saved_sysctls=()

in_ns() { nsenter --net="/run/netns/$netns" "$@"; }
in_node_ns() { nsenter --net="/run/netns/${node_netns[$1]}" "${@:2}"; }
kubectl() { in_ns "$k8s_bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" --cache-dir "$dir/kube-cache" "$@"; }

pids=()
names=()
kubelet_pid=
# start_on I NAME COMMAND...: a component in node I's namespace (0: the
# first node's, the control plane's), its log in DIR/NAME.log
start_on() {
    local i=$1 name=$2
    shift 2
    # nsenter execs the component: $! is its pid
    nsenter --net="/run/netns/${node_netns[$i]}" "$@" >"$dir/$name.log" 2>&1 9>&- &
    pids+=($!)
    names+=("$name")
}
start() { start_on 0 "$@"; }

cleanup() {
    local i p
    set +e
    # a signal now (the harness stopping a failed start) must not cut the
    # cleanup short: that leaves components running and kernel settings
    # changed
    trap '' INT TERM
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
    # the kubelets' cgroups, deepest first (a pod still running keeps its own)
    for c in /sys/fs/cgroup/*/; do
        for r in "${cgroup_roots[@]}"; do
            [ -d "$c${r#/}" ] && find "$c${r#/}" -depth -type d -exec rmdir {} + 2>/dev/null
        done
    done
    # the kubelet's links to its pods' logs
    for p in /var/log/containers/*.log; do
        [ -L "$p" ] && [[ $(readlink "$p") == "$dir/"* ]] && rm -f "$p"
    done
    in_ns ip link del thawnode0 2>/dev/null
    for i in "${!node_netns[@]}"; do
        [ "$i" -eq 0 ] || in_ns ip link del "thawnode$((i + 1))" 2>/dev/null
    done
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
# node I+1's namespace: a veth pair to the first node's, its address a /32
# at each end's route, its pod subnet routed to it, its default route back
for i in "${!node_netns[@]}"; do
    [ "$i" -gt 0 ] || continue
    link=thawnode$((i + 1)) ip=${node_ips[$i]}
    ip link add "$link" netns "$netns" type veth peer name thawnode0 netns "${node_netns[$i]}"
    in_ns ip link set "$link" up
    in_ns ip route add "$ip/32" dev "$link"
    in_ns ip route add "${node_cidr[$i]}" via "$ip" dev "$link"
    in_node_ns "$i" ip addr add "$ip/32" dev thawnode0
    in_node_ns "$i" ip link set thawnode0 up
    in_node_ns "$i" ip route add "$node_ip/32" dev thawnode0
    in_node_ns "$i" ip route add default via "$node_ip" dev thawnode0
done

# --- certificates and kubeconfigs ------------------------------------------
pki=$dir/pki
mkdir -p "$pki"
(
    k8s_ca "$pki" thaw-cluster-ca
    k8s_sa_keys "$pki"
    k8s_cert "$pki" apiserver /CN=kube-apiserver serverAuth \
        "IP:$node_ip,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default.svc"
    for i in "${!node_names[@]}"; do
        k8s_cert "$pki" "kubelet-serving-$i" "/CN=${node_names[$i]}" serverAuth "IP:${node_ips[$i]},DNS:${node_names[$i]}"
        k8s_cert "$pki" "kubelet-$i" "/O=system:nodes/CN=system:node:${node_names[$i]}" clientAuth
    done
    # the clients, as the default RBAC roles name them
    k8s_cert "$pki" admin /O=system:masters/CN=admin clientAuth
    k8s_cert "$pki" apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client clientAuth
    k8s_cert "$pki" controller-manager /CN=system:kube-controller-manager clientAuth
    k8s_cert "$pki" scheduler /CN=system:kube-scheduler clientAuth
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
for k in admin controller-manager scheduler kube-proxy; do kubeconfig "$k"; done
for i in "${!node_names[@]}"; do kubeconfig "kubelet-$i"; done

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

# --- the nodes --------------------------------------------------------------
echo "nameserver 127.0.0.1" >"$dir/resolv.conf"
for s in "${kubelet_sysctls[@]}"; do saved_sysctls+=("$(cat "/proc/sys/$s")"); done
# start_node I: node I's kubelet and kube-proxy, in its namespace; the
# first node's files keep plain names (kubelet.log, ...), the others' have
# the node's number (kubelet-2.log, ...)
start_node() {
    local i=$1 sfx c f r=${cgroup_roots[$1]} ip=${node_ips[$1]} name=${node_names[$1]}
    sfx=$([ "$i" -eq 0 ] || echo "-$((i + 1))")
    mkdir -p "$dir/kubelet$sfx" "$dir/pod-logs$sfx"
    cat >"$dir/kubelet$sfx.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving-$i.crt
tlsPrivateKeyFile: $pki/kubelet-serving-$i.key
containerRuntimeEndpoint: unix://${node_containerd[$i]}
cgroupDriver: cgroupfs
cgroupRoot: $r
failSwapOn: false
failCgroupV1: false
podLogsDir: $dir/pod-logs$sfx
clusterDomain: cluster.local
# the pods' resolver is their own loopback, where nothing answers: lookups
# fail at once and never leave for the host's resolver
resolvConf: $dir/resolv.conf
# the test's images are imported, never pulled: none may be collected
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# a shared build machine's disk: evict for memory only
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
EOF
    # the cgroup root must exist in every hierarchy; cpuset's needs its CPUs
    for c in /sys/fs/cgroup/*/; do
        [ -e "${c}cgroup.procs" ] || continue
        mkdir "$c${r#/}"
        for f in cpuset.cpus cpuset.mems; do
            [ -e "$c$f" ] && cat "$c$f" >"$c${r#/}/$f"
        done
    done
    start_on "$i" "kubelet$sfx" "$k8s_bin/kubelet" --config="$dir/kubelet$sfx.yaml" \
        --kubeconfig="$dir/kubelet-$i.kubeconfig" --root-dir="$dir/kubelet$sfx" \
        --cert-dir="$dir/kubelet-certs$sfx" --hostname-override="$name" \
        --node-ip="$ip" --node-labels=thaw.dev/runtime=true
    [ "$i" -gt 0 ] || kubelet_pid=${pids[-1]}

    cat >"$dir/kube-proxy$sfx.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $name
clusterCIDR: $pod_cidr
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$ip/32]
# the namespace may not change the host's conntrack table: leave it as it is
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
    start_on "$i" "kube-proxy$sfx" "$k8s_bin/kube-proxy" --config="$dir/kube-proxy$sfx.yaml"
}
node_ready() {
    [ "$(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
# One kubelet starts at a time on this machine, each until its node is
# Ready: every kubelet serves device plugins on the one fixed path
# /var/lib/kubelet/device-plugins/kubelet.sock (whatever its root
# directory), first removing what is there, and two doing that at once fail.
exec 9>/run/lock/thaw-kubelet-start.lock
for i in "${!node_names[@]}"; do
    wait_for "the lock on kubelet starts (/run/lock/thaw-kubelet-start.lock)" 600 flock -n 9
    start_node "$i"
    wait_for "the node ${node_names[$i]} Ready" 180 node_ready "${node_names[$i]}"
    flock -u 9
done
exec 9>&-
# each node with a thaw daemon: its snapshots advertised in its labels, with
# the node's own credentials (a node changes its own object only)
for i in "${!node_names[@]}"; do
    [ -n "${node_thaw[$i]}" ] || continue
    start "snapshot-labels-$((i + 1))" python3 "$here/snapshot-labels.py" --node "${node_names[$i]}" \
        --thaw-socket "${node_thaw[$i]}" --kubectl "$k8s_bin/kubectl" --kubeconfig "$dir/kubelet-$i.kubeconfig"
done
kubectl apply -f "$here/runtimeclass.yaml" >/dev/null
# the namespace's default service account (the controller manager makes it)
wait_for "the default service account" 60 kubectl get serviceaccount default

cat >"$dir/kubectl" <<EOF
#!/bin/sh
exec nsenter --net=/run/netns/$netns $k8s_bin/kubectl --kubeconfig $dir/admin.kubeconfig --cache-dir $dir/kube-cache "\$@"
EOF
chmod +x "$dir/kubectl"
printf '%s\n' "${node_names[@]}" >"$dir/ready"
say "ready: nodes ${node_names[*]} (${node_ips[*]}) Ready, Kubernetes $K8S_VERSION; kubectl: $dir/kubectl"

# until a signal, or a component exits
set +e
wait -n "${pids[@]}"
trap - ERR
alive
