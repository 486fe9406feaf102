#!/usr/bin/env bash
# The Kubernetes binaries the scripts here run, built once per version from
# the Go module proxy (the k8s.io/kubernetes module at $K8S_VERSION with its
# staging modules taken at their published versions) and cached under
# ${THAW_HOME:-/var/lib/thaw}/tools/kubernetes-$K8S_VERSION, and the
# certificate helpers of a private cluster.
#
# Sourced by validate.sh and cluster.sh (which define say and die first).
# Run on its own it builds the binaries named, or every one the scripts use:
#
#   deploy/kubernetes/tools.sh [BINARY...]
#
# (scripts/setup.sh --tests runs it, so a fresh machine builds them once).

# Go >= 1.21 fetches the toolchain a module asks for (1.23 here)
export GOTOOLCHAIN=auto
K8S_VERSION=v1.32.13
# staging modules whose zip at their published version the Go module proxy
# refuses (403 "not available": k8s.io/endpointslice v0.32.10 and v0.32.13),
# taken at the nearest patch release it serves
K8S_MODULE_PINS=(k8s.io/endpointslice@v0.32.12)
# every binary validate.sh and cluster.sh run
K8S_BINARIES=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy)

k8s_tools=${THAW_HOME:-/var/lib/thaw}/tools
k8s_bin=$k8s_tools/kubernetes-$K8S_VERSION
k8s_work=

# module_dir MODULE@VERSION: the module's files in Go's module cache
module_dir() {
    GOFLAGS=-mod=mod go mod download -json "$1" \
        | python3 -c 'import json, sys; d = json.load(sys.stdin); sys.exit(d["Error"]) if "Error" in d else print(d["Dir"])'
}

# k8s_cleanup: removes a build's work directory left by an interrupted run
k8s_cleanup() {
    if [ -n "$k8s_work" ]; then
        chmod -R u+w "$k8s_work" 2>/dev/null || true
        rm -rf "$k8s_work"
        k8s_work=
    fi
}

# k8s_build BINARY...: builds these (./cmd/BINARY) into $k8s_bin
k8s_build() {
    local src minor ld p m b start=$SECONDS pkgs=()
    # a work directory in the cache's file system, so each result moves in whole
    k8s_work=$(mktemp -d "$k8s_tools/.build-kubernetes.XXXXXX")
    say "building $* $K8S_VERSION from the Go module proxy (once; several minutes)"
    src=$k8s_work/src
    cp -r "$(module_dir "k8s.io/kubernetes@$K8S_VERSION")" "$src"
    chmod -R u+w "$src"
    # The module's go.mod points its staging modules at ./staging, which a
    # module download does not hold (nested modules are published on their
    # own): require the published versions (k8s.io/x v0.N.P for v1.N.P).
    local args=()
    local pinned v
    for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$src/go.mod"); do
        v=v0.${K8S_VERSION#v1.}
        for pinned in "${K8S_MODULE_PINS[@]}"; do
            if [ "${pinned%@*}" = "$m" ]; then v=${pinned#*@}; fi
        done
        args+=("-dropreplace=$m" "-require=$m@$v")
    done
    [ ${#args[@]} -gt 0 ] || die "no staging replacements in k8s.io/kubernetes@$K8S_VERSION's go.mod"
    # the vendor list and the workspace file name the staging copies too
    rm -f "$src/go.work" "$src/go.work.sum" "$src/vendor/modules.txt"
    (cd "$src" && go mod edit "${args[@]}")
    minor=${K8S_VERSION#v1.}
    minor=${minor%%.*}
    ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    done
    for b in "$@"; do pkgs+=("./cmd/$b"); done
    (cd "$src" && GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" \
        go build -trimpath -ldflags "$ld" -o "$k8s_work/bin/" "${pkgs[@]}")
    mkdir -p "$k8s_bin"
    for b in "$@"; do
        "$k8s_work/bin/$b" --help >/dev/null
        mv "$k8s_work/bin/$b" "$k8s_bin/$b"
    done
    k8s_cleanup
    say "built $* in $((SECONDS - start)) s into $k8s_bin"
}

# k8s_ensure BINARY...: builds those of them not in the cache yet; one run
# builds at a time, a run that waited finds the other's binaries
k8s_ensure() {
    local b missing=()
    for b in "$@"; do [ -x "$k8s_bin/$b" ] || missing+=("$b"); done
    [ ${#missing[@]} -gt 0 ] || return 0
    for p in go:golang-go python3:python3 flock:util-linux; do
        command -v "${p%%:*}" >/dev/null 2>&1 || die "${p%%:*} not found (Debian's ${p##*:}; scripts/setup.sh --tests installs it)"
    done
    mkdir -p "$k8s_tools"
    exec 9>"$k8s_tools/kubernetes.lock"
    flock 9
    missing=()
    for b in "$@"; do [ -x "$k8s_bin/$b" ] || missing+=("$b"); done
    if [ ${#missing[@]} -gt 0 ]; then k8s_build "${missing[@]}"; fi
    exec 9>&-
}

# k8s_ca DIR NAME: a CA (DIR/ca.crt, DIR/ca.key) for one day
k8s_ca() {
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=$2" \
        -keyout "$1/ca.key" -out "$1/ca.crt"
}

# k8s_cert DIR NAME SUBJECT USAGE [SAN]: DIR/NAME.crt and .key signed by
# DIR's CA, for USAGE (serverAuth, clientAuth) and the subjectAltName SAN
k8s_cert() {
    local dir=$1 name=$2 subject=$3 usage=$4 san=${5:-}
    openssl req -newkey rsa:2048 -nodes -subj "$subject" \
        -keyout "$dir/$name.key" -out "$dir/$name.csr"
    { echo "extendedKeyUsage=$usage"; [ -z "$san" ] || echo "subjectAltName=$san"; } >"$dir/$name.ext"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 1 -extfile "$dir/$name.ext" -out "$dir/$name.crt"
    rm -f "$dir/$name.csr" "$dir/$name.ext"
}

# k8s_sa_keys DIR: the service accounts' signing key pair (DIR/sa.key, sa.pub)
k8s_sa_keys() {
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1/sa.key"
    openssl pkey -in "$1/sa.key" -pubout -out "$1/sa.pub"
}

# free_ports N: N free TCP ports on 127.0.0.1
free_ports() {
    python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))' "$1"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -eEuo pipefail
    say() { echo "tools: $*" >&2; }
    die() { say "$*"; exit 2; }
    trap k8s_cleanup EXIT
    if [ $# -eq 0 ]; then set -- "${K8S_BINARIES[@]}"; fi
    for b in "$@"; do
        [[ " ${K8S_BINARIES[*]} " == *" $b "* ]] || die "usage: $0 [BINARY...] (one of ${K8S_BINARIES[*]}; not $b)"
    done
    k8s_ensure "$@"
    say "$K8S_VERSION: $* in $k8s_bin"
fi
