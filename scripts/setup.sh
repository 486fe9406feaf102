#!/usr/bin/env bash
# Host set-up for thaw on a fresh Debian 12 machine: checks the kernel
# facilities thaw needs and installs what is missing. Idempotent.
# `--tests` also installs what only the tests and the benchmarks use: MinIO
# for the emulated remote tier, containerd, runc, crictl and the CNI plugins
# for the shim's tests, etcd, openssl, iptables and the Kubernetes binaries
# (built from the Go module proxy, deploy/kubernetes/tools.sh) for the
# manifests' check and the kubelet test's cluster, boto3 and the AWS CLI for
# the Lambda API's tests, and AWS's Runtime Interface Emulator and
# Lambda's runtime clients awslambdaric and aws-lambda-ric
# (scripts/lambda-tools.sh).
set -euo pipefail
for_tests=false
case "${1:-}" in
    --tests) for_tests=true ;;
    "") ;;
    *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

die() { echo "setup: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "thaw needs root (namespaces, ptrace, userfaultfd, cgroups, mounts)"

# Debian packages the build and the runtime-root recipe use.
need_pkgs=()
# losetup/mount/blkid (util-linux), mkfs.ext4 and tc back the emulated storage tiers.
# nft (nftables) holds the egress rules of functions given network access.
# javac and jar (the JDK) compile the runtime root's Java agent and the Java
# tests' functions; curl fetches the root's jars from Maven Central.
for p in gcc:gcc apt-get:apt dpkg-deb:dpkg ip:iproute2 tc:iproute2 python3:python3 \
    losetup:util-linux blkid:util-linux mkfs.ext4:e2fsprogs nft:nftables nsenter:util-linux \
    javac:openjdk-17-jdk-headless jar:openjdk-17-jdk-headless curl:curl; do
    command -v "${p%%:*}" >/dev/null 2>&1 || need_pkgs+=("${p##*:}")
done
if $for_tests; then
    # containerd and ctr run the shim's tests (a private containerd per test);
    # dnsmasq (dnsmasq-base, no service) answers the egress tests' test zone
    for p in containerd:containerd ctr:containerd runc:runc dnsmasq:dnsmasq-base; do
        command -v "${p%%:*}" >/dev/null 2>&1 || need_pkgs+=("${p##*:}")
    done
    # the CRI tests' pod network (bridge + host-local), and a static libc for
    # the pause and sidecar binaries they build
    [ -x /usr/lib/cni/bridge ] || need_pkgs+=(containernetworking-plugins)
    [ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need_pkgs+=(libc6-dev)
    # the shim's tests parse the Kubernetes manifests with PyYAML
    /usr/bin/python3 -c 'import yaml' 2>/dev/null || need_pkgs+=(python3-yaml)
    # the egress tests' database server (run by the test as the postgres
    # user on a cluster of its own; the Debian service is not used)
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_pkgs+=(postgresql)
    # the Kubernetes manifests' check (deploy/kubernetes/validate.sh) runs
    # an etcd of its own on loopback and makes its certificates with openssl
    # (and the kubelet test's cluster, whose kube-proxy writes iptables rules)
    for p in etcd:etcd-server openssl:openssl iptables:iptables; do
        command -v "${p%%:*}" >/dev/null 2>&1 || need_pkgs+=("${p##*:}")
    done
    # Lambda's Node.js runtime client builds its curl and C++ client from
    # their sources (scripts/lambda-tools.sh nodejs-ric)
    for p in autoreconf:autoconf automake:automake libtoolize:libtool; do
        command -v "${p%%:*}" >/dev/null 2>&1 || need_pkgs+=("${p##*:}")
    done
    # the registry test pushes an image archive with skopeo to a registry of
    # its own (Debian's docker-registry, in a network namespace it makes)
    for p in docker-registry:docker-registry skopeo:skopeo; do
        command -v "${p%%:*}" >/dev/null 2>&1 || need_pkgs+=("${p##*:}")
    done
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "setup: installing ${need_pkgs[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
    # Debian starts etcd and the registry as services on install; the
    # tests run their own
    for svc in etcd-server:etcd docker-registry:docker-registry; do
        if [[ " ${need_pkgs[*]} " == *" ${svc%%:*} "* ]] && [ -d /run/systemd/system ]; then
            systemctl disable --now "${svc##*:}.service" >/dev/null 2>&1 || true
        fi
    done
fi

# Rust toolchain and the components the test script uses.
command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) first"
if command -v rustup >/dev/null 2>&1; then
    for c in rustfmt clippy; do
        rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
    done
fi

# Kernel facilities, checked up front so failures name what is missing.
for ctrl in memory pids; do
    [ -e "/sys/fs/cgroup/$ctrl/cgroup.procs" ] || die "cgroup v1 '$ctrl' controller is not mounted at /sys/fs/cgroup/$ctrl"
done
[ -e /dev/shm ] || die "/dev/shm (tmpfs) is missing"

# Moving a task into a cgroup takes the kernel's global threadgroup rwsem for
# writing; in its default mode that waits for an RCU grace period (measured:
# 8-12 ms per sandbox start after an idle spell). 'favordynmods' on any
# hierarchy keeps the rwsem in the mode where writers are cheap; the cgroup v2
# mount accepts the option on remount here.
if grep -q " /sys/fs/cgroup/unified cgroup2 " /proc/mounts && ! grep -q " /sys/fs/cgroup/unified cgroup2 .*favordynmods" /proc/mounts; then
    mount -o remount,favordynmods /sys/fs/cgroup/unified \
        || echo "setup: warning: could not set favordynmods; sandbox starts pay an RCU grace period" >&2
fi
# DRAM-tier images are copied into sealed memfds that restores map privately;
# read faults map 16 pages at a time over 4 KiB folios, in batches over large
# ones, with one PMD entry over a 2 MiB one. 'advise' lets thaw fill the memfd
# through a MADV_HUGEPAGE mapping in 2 MiB folios (node_helloworld's mmap
# cold start 10% faster, docs/BENCHMARKS.md); other shmem (tmpfs mounts keep
# their own huge= option) stays as it was. No memory is added: the image's
# pages are all written anyway and its tail stays in 4 KiB folios.
thp_shmem=/sys/kernel/mm/transparent_hugepage/shmem_enabled
if [ -w "$thp_shmem" ] && grep -q '\[never\]' "$thp_shmem"; then
    echo advise >"$thp_shmem" \
        || echo "setup: warning: could not set $thp_shmem to advise; DRAM-tier images stay in 4 KiB folios" >&2
fi
# The emulated remote tier runs MinIO, built from the Go module proxy only
# where the remote tier is used (`--tests`: the tests and the benchmarks; the
# demo never touches it). The version is pinned so a new release cannot break
# a fresh machine. MinIO needs a recent Go: GOTOOLCHAIN=auto lets Go >= 1.21
# fetch the toolchain it asks for through the same proxy; Debian 12's own Go
# (1.19) is too old.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
if $for_tests; then
    if ! command -v go >/dev/null 2>&1; then
        echo "setup: installing golang-go (to build MinIO)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go
    fi
    gobin=$(go env GOPATH)/bin
    if ! command -v minio >/dev/null 2>&1 && [ ! -x "$gobin/minio" ]; then
        echo "setup: building MinIO $MINIO_VERSION for the emulated remote tier (go install: about 4 minutes and 300 MB of modules, once)" >&2
        GOTOOLCHAIN=auto GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION" \
            || die "go install github.com/minio/minio@$MINIO_VERSION failed (it needs Go >= 1.21 to fetch its toolchain; found $(go version))"
    fi
    # crictl makes the kubelet's CRI calls in the shim's tests, pinned like MinIO
    CRICTL_VERSION=v1.37.0
    if ! command -v crictl >/dev/null 2>&1 && [ ! -x "$gobin/crictl" ]; then
        echo "setup: building crictl $CRICTL_VERSION (go install, once)" >&2
        GOTOOLCHAIN=auto GOFLAGS=-mod=mod go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
            || die "go install sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION failed"
    fi
    # kube-apiserver, kubectl, the controller manager, the scheduler, kubelet
    # and kube-proxy of one pinned release, built once into $THAW_HOME/tools
    # (from empty Go caches about 15 minutes on 2 cores; cached after)
    "$(dirname "$0")/../deploy/kubernetes/tools.sh" \
        || die "building the Kubernetes binaries (deploy/kubernetes/tools.sh) failed"
fi
# The Lambda API's tests drive the daemon with AWS's own clients: boto3 and
# the AWS CLI v1 from PyPI, pinned (both on botocore 1.40.20), in a virtual
# environment of Debian's Python kept outside the state home, made once.
LAMBDA_CLIENTS_DIR=${HOME:-/root}/.cache/thaw/lambda-clients
BOTO3_VERSION=1.40.20
AWSCLI_VERSION=1.42.20
if $for_tests; then
    /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || {
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    }
    if ! "$LAMBDA_CLIENTS_DIR/bin/python" -c "import boto3, awscli, sys; sys.exit(boto3.__version__ != '$BOTO3_VERSION' or awscli.__version__ != '$AWSCLI_VERSION')" 2>/dev/null; then
        echo "setup: installing boto3 $BOTO3_VERSION and awscli $AWSCLI_VERSION into $LAMBDA_CLIENTS_DIR (PyPI, once)" >&2
        rm -rf "$LAMBDA_CLIENTS_DIR"
        /usr/bin/python3 -m venv "$LAMBDA_CLIENTS_DIR"
        "$LAMBDA_CLIENTS_DIR/bin/pip" install -q --disable-pip-version-check \
            "boto3==$BOTO3_VERSION" "awscli==$AWSCLI_VERSION" \
            || die "pip install boto3==$BOTO3_VERSION awscli==$AWSCLI_VERSION failed"
    fi
    # AWS's Runtime Interface Emulator (`thaw bench lambda`'s peer),
    # Lambda's Python runtime client awslambdaric (the bench and a Lambda
    # test) and its Node.js one aws-lambda-ric (a Lambda test), pinned in
    # lambda-tools.sh, cached by version
    for tool in rie awslambdaric nodejs-ric; do
        "$(dirname "$0")/lambda-tools.sh" "$tool" >/dev/null \
            || die "scripts/lambda-tools.sh $tool failed"
    done
fi
echo "setup: host ready" >&2
