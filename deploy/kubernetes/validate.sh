#!/usr/bin/env bash
# Validates the Kubernetes manifests against a real API server: a private
# kube-apiserver and etcd on loopback (ports picked here, certificates and
# data in a temporary directory removed on exit), Knative Serving's CRDs
# applied, then each manifest through three checks: `kubectl apply
# --dry-run=client --validate=true` with the server's kubectl and with
# Debian's kubectl 1.20 (which checks every field against the server's
# OpenAPI schema itself), and `kubectl apply --dry-run=server
# --validate=true` (the server's strict field validation, defaulting and
# admission, nothing persisted).
#
#   deploy/kubernetes/validate.sh            every *.yaml here, then broken
#                                            copies that must be refused
#   deploy/kubernetes/validate.sh FILE...    these files only
#
# Exit 0 when every manifest is valid, 1 when one is refused (kubectl's
# message is printed), 2 on a usage or set-up error.
#
# kube-apiserver and kubectl are built once from the Go module proxy (the
# k8s.io/kubernetes module at $K8S_VERSION with its staging modules taken
# at their published versions) and Debian's kubectl is unpacked from its
# .deb, both cached under ${THAW_HOME:-/var/lib/thaw}/tools; etcd is
# Debian's etcd-server; Knative's CRDs come from the knative.dev/serving
# module. Nothing listens on any address but 127.0.0.1, and ~/.kube is
# neither read nor written.
set -eEuo pipefail

KNATIVE_SERVING_VERSION=v0.42.2

here=$(cd "$(dirname "$0")" && pwd)
say() { echo "validate: $*" >&2; }
die() { say "$*"; exit 2; }
# a failed set-up step is a set-up error (2), not a refused manifest (1)
trap 'die "failed (line $LINENO): $BASH_COMMAND"' ERR

manifests=()
self_check=false
if [ $# -eq 0 ]; then
    for f in "$here"/*.yaml; do manifests+=("$f"); done
    self_check=true
else
    for f in "$@"; do
        case "$f" in -*) die "usage: $0 [FILE...] (unknown option $f)" ;; esac
        [ -f "$f" ] || die "no such file: $f"
        manifests+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
    done
fi
[ ${#manifests[@]} -gt 0 ] || die "no manifest to validate"

for p in go:golang-go openssl:openssl python3:python3 etcd:etcd-server apt-get:apt dpkg-deb:dpkg flock:util-linux; do
    command -v "${p%%:*}" >/dev/null 2>&1 || die "${p%%:*} not found (Debian's ${p##*:}; scripts/setup.sh --tests installs it)"
done

tmp=$(mktemp -d /tmp/thaw-k8s-validate.XXXXXX)
pids=()
work=
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
    k8s_cleanup
    if [ -n "$work" ]; then chmod -R u+w "$work" 2>/dev/null || true; rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the tools, fetched or built once per version --------------------------
# shellcheck source=tools.sh
. "$here/tools.sh"
tools=$k8s_tools
mkdir -p "$tools"
# a work directory in the cache's file system, so a result moves in whole
new_work() { work=$(mktemp -d "$tools/.$1.XXXXXX"); }
# install_work DIR: the work directory's bin/ becomes DIR
install_work() {
    rm -rf "$1"
    mv "$work/bin" "$1"
    chmod -R u+w "$work"
    rm -rf "$work"
    work=
}
bin=$k8s_bin

# Debian's kubectl (kubernetes-client, 1.20) checks every field against the
# server's OpenAPI schema itself, where kubectl 1.32 leaves that to a server
# with server-side field validation (as this one has): its client dry run
# checks no field.
# Unpacked from its .deb into the cache rather than installed: another
# kubectl (a cloud SDK's) owns /usr/bin/kubectl on some machines.
deb_version() {
    { apt-cache show --no-all-versions kubernetes-client 2>/dev/null || true; } | awk '/^Version:/ { print $2; exit }'
}
deb=$(deb_version)
if [ -z "$deb" ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    deb=$(deb_version)
fi
[ -n "$deb" ] || die "apt knows no kubernetes-client package (apt-get update first)"
old_bin=$tools/kubernetes-client-$deb
fetch_debian_kubectl() {
    new_work kubernetes-client
    # _apt cannot read root's directories: apt says the download is unsandboxed
    (cd "$work" && apt-get download -qq "kubernetes-client=$deb" 2>&1) | { grep -v unsandboxed >&2 || true; }
    dpkg-deb -x "$work"/kubernetes-client_*.deb "$work/x"
    mkdir "$work/bin"
    mv "$work/x/usr/bin/kubectl" "$work/bin/kubectl"
    install_work "$old_bin"
}

k8s_ensure kube-apiserver kubectl
if [ ! -x "$old_bin/kubectl" ]; then
    # one run fetches at a time; a run that waited finds the other's copy
    exec 9>"$tools/kubernetes.lock"
    flock 9
    if [ ! -x "$old_bin/kubectl" ]; then fetch_debian_kubectl; fi
    exec 9>&-
fi
old_version=$("$old_bin/kubectl" version --client -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')

knative=$(module_dir "knative.dev/serving@$KNATIVE_SERVING_VERSION")
crds=$knative/config/core/300-resources
[ -d "$crds" ] || die "no CRDs in $crds"

# --- a private API server ------------------------------------------------

# three free loopback ports (etcd's client and peer ports, the API server's)
read -r etcd_port peer_port api_port < <(free_ports 3)

# certificates: a CA, the server's for 127.0.0.1, the service accounts' keys
pki=$tmp/pki
mkdir -p "$pki"
(
    k8s_ca "$pki" thaw-validate-ca
    k8s_cert "$pki" server /CN=kube-apiserver serverAuth IP:127.0.0.1,DNS:localhost
    k8s_sa_keys "$pki"
) >"$tmp/openssl.log" 2>&1 || { cat "$tmp/openssl.log" >&2; die "openssl failed"; }
token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
echo "$token,admin,admin,system:masters" >"$pki/tokens.csv"

etcd --name validate --data-dir "$tmp/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "validate=http://127.0.0.1:$peer_port" >"$tmp/etcd.log" 2>&1 &
pids+=($!)
"$bin/kube-apiserver" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --tls-cert-file="$pki/server.crt" --tls-private-key-file="$pki/server.key" \
    --client-ca-file="$pki/ca.crt" --token-auth-file="$pki/tokens.csv" \
    --authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/24 \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --endpoint-reconciler-type=none --cert-dir="$tmp/certs" >"$tmp/apiserver.log" 2>&1 &
pids+=($!)

cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: validate
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: validate
  context: {cluster: validate, user: admin, namespace: default}
current-context: validate
EOF
# HOME too: kubectl would keep its caches in ~/.kube
kubectl() { HOME=$tmp KUBECONFIG=$tmp/kubeconfig "$bin/kubectl" --cache-dir="$tmp/kube-cache" "$@"; }
old_kubectl() { HOME=$tmp KUBECONFIG=$tmp/kubeconfig "$old_bin/kubectl" --cache-dir="$tmp/old-kube-cache" "$@"; }

ready=false
for _ in $(seq 1 240); do
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || {
            tail -n 30 "$tmp/etcd.log" "$tmp/apiserver.log" >&2
            die "etcd or kube-apiserver exited"
        }
    done
    # ready, and the bootstrap has made the default namespace
    if kubectl get --raw /readyz >/dev/null 2>&1 && kubectl get namespace default >/dev/null 2>&1; then
        ready=true
        break
    fi
    sleep 0.5
done
$ready || { tail -n 30 "$tmp/apiserver.log" >&2; die "kube-apiserver not ready after 120 s"; }
server_version=$(kubectl version -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
etcd_version=$(etcd --version | awk '/^etcd Version/ { print $3 }')
say "kube-apiserver $server_version on 127.0.0.1:$api_port, etcd $etcd_version"

kubectl apply -f "$crds" >"$tmp/crds.log" 2>&1 || { cat "$tmp/crds.log" >&2; die "Knative Serving's CRDs refused"; }
kubectl wait --for condition=established --timeout=60s -f "$crds" >>"$tmp/crds.log" 2>&1 \
    || { cat "$tmp/crds.log" >&2; die "Knative Serving's CRDs not established"; }
say "Knative Serving $KNATIVE_SERVING_VERSION CRDs established"

# The three checks: kubectl $K8S_VERSION's client dry run (the document
# parses, the server serves its kind), Debian's kubectl's client dry run
# (also every field against the server's OpenAPI schema, CRDs' included),
# the server dry run (strict field validation, defaulting, admission).
modes=(client debian-client server)
label() {
    case $1 in
        client) echo "client dry run" ;;
        debian-client) echo "client dry run, kubectl $old_version" ;;
        server) echo "server dry run" ;;
    esac
}
# dry_run MODE FILE: kubectl's answer on stdout, its status
dry_run() {
    case $1 in
        client) kubectl apply --dry-run=client --validate=true -f "$2" 2>&1 ;;
        debian-client) old_kubectl apply --dry-run=client --validate=true -f "$2" 2>&1 ;;
        server) kubectl apply --dry-run=server --validate=true -f "$2" 2>&1 ;;
    esac
}
# validate FILE: every check; kubectl's messages on stderr, 1 if refused
validate() {
    local f=$1 mode out rc=0
    for mode in "${modes[@]}"; do
        if out=$(dry_run "$mode" "$f"); then
            say "valid ($(label "$mode")): ${f#"$here"/}"
        else
            printf '%s\n' "$out" >&2
            say "REFUSED ($(label "$mode")): ${f#"$here"/}"
            rc=1
        fi
    done
    return $rc
}

failed=0
for f in "${manifests[@]}"; do
    validate "$f" || failed=$((failed + 1))
done
if [ $failed -gt 0 ]; then
    say "$failed of ${#manifests[@]} manifests refused"
    exit 1
fi

if $self_check; then
    # Broken copies must be refused: a misspelled field, a wrong type, a
    # misspelled kind, in the Deployment, the Knative Service (its CRD's
    # schema) and the RuntimeClass. kubectl $K8S_VERSION's client dry run
    # refuses only the kind (it leaves fields to the server); the two others
    # refuse each.
    #   copy                                 refused by                  from                   change
    broken=(
        "misspelled-field.yaml               debian-client,server        hello-deployment.yaml  s/containerPort:/containerPrt:/"
        "wrong-type.yaml                     debian-client,server        hello-deployment.yaml  s/replicas: 2/replicas: two/"
        "misspelled-kind.yaml                client,debian-client,server hello-deployment.yaml  s/^kind: Deployment/kind: Deploymnet/"
        "knative-misspelled-field.yaml       debian-client,server        hello-knative.yaml     s/runtimeClassName:/runtimeClasName:/"
        "knative-wrong-type.yaml             debian-client,server        hello-knative.yaml     s/containerPort: 8080/containerPort: eighty/"
        "runtimeclass-misspelled-field.yaml  debian-client,server        runtimeclass.yaml      s/^handler:/handlr:/"
    )
    mkdir -p "$tmp/broken"
    refused=0
    for b in "${broken[@]}"; do
        read -r copy by from change <<<"$b"
        sed "$change" "$here/$from" >"$tmp/broken/$copy"
        cmp -s "$tmp/broken/$copy" "$here/$from" && die "the broken copy $copy is the same as $from"
        for mode in ${by//,/ }; do
            if out=$(dry_run "$mode" "$tmp/broken/$copy"); then
                say "a broken copy was accepted ($(label "$mode")): $copy ($from, $change)"
                exit 1
            fi
            say "broken copy refused as expected ($(label "$mode")): $copy: $(printf '%s' "$out" | tr '\n' ' ')"
            refused=$((refused + 1))
        done
    done
    say "${#broken[@]} broken copies refused ($refused refusals)"
fi
say "${#manifests[@]} manifests valid (client dry runs of kubectl $server_version and $old_version, server dry run; kube-apiserver $server_version, etcd $etcd_version, Knative Serving $KNATIVE_SERVING_VERSION CRDs)"
