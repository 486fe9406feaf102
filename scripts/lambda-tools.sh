#!/usr/bin/env bash
# AWS's own Lambda tools that thaw is compared with and tested against,
# pinned, made once into a cache keyed by their versions; prints the path.
#
#   lambda-tools.sh rie           the Runtime Interface Emulator (Go module
#                                 proxy, `go install`): .../aws-lambda-rie
#   lambda-tools.sh awslambdaric  Lambda's Python runtime interface client
#                                 (PyPI wheels for CPython 3.11, the runtime
#                                 root's and Debian 12's): a directory to
#                                 put on sys.path or into a function's zip
#
# scripts/setup.sh --tests runs both; `thaw bench lambda` and the Lambda
# tests call it again (a no-op once cached).
set -euo pipefail
# The emulator's releases are tagged v1.NN, which Go does not take as module
# versions; this pseudo-version names its commit of 2026-10-30.
RIE_VERSION=v0.0.0-20261030222936-bef5c4ba774d
AWSLAMBDARIC_VERSION=4.2.2
# its dependencies, pinned too (installed with --no-deps)
SIMPLEJSON_VERSION=4.3.0
SNAPSHOT_RESTORE_PY_VERSION=1.0.0

what=${1:?usage: lambda-tools.sh rie|awslambdaric}
case $what in rie | awslambdaric) ;; *) echo "unknown tool $what (rie or awslambdaric)" >&2; exit 1 ;; esac
cache=${THAW_LAMBDA_TOOLS_CACHE:-${HOME:-/root}/.cache/thaw/lambda-tools}
mkdir -p "$cache"
exec 9>"$cache/$what.lock"
flock 9
case $what in
rie)
    out=$cache/rie-$RIE_VERSION
    if [ ! -x "$out/aws-lambda-rie" ]; then
        command -v go >/dev/null || { echo "go is not installed (scripts/setup.sh --tests)" >&2; exit 1; }
        echo "lambda-tools: building the Runtime Interface Emulator $RIE_VERSION (go install, once)" >&2
        rm -rf "$out.tmp"
        GOBIN=$out.tmp CGO_ENABLED=0 GOTOOLCHAIN=auto GOFLAGS=-mod=mod \
            go install -trimpath "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$RIE_VERSION" >&2
        rm -rf "$out" && mv "$out.tmp" "$out"
    fi
    echo "$out/aws-lambda-rie"
    ;;
awslambdaric)
    out=$cache/awslambdaric-$AWSLAMBDARIC_VERSION
    if [ ! -f "$out/awslambdaric/__main__.py" ]; then
        # pip of the Lambda clients' venv (setup.sh --tests makes it first)
        pip=${HOME:-/root}/.cache/thaw/lambda-clients/bin/pip
        [ -x "$pip" ] || { echo "$pip is missing (scripts/setup.sh --tests makes it)" >&2; exit 1; }
        echo "lambda-tools: installing awslambdaric $AWSLAMBDARIC_VERSION (PyPI wheels, once)" >&2
        rm -rf "$out.tmp"
        # wheels for the runtime root's CPython 3.11, whatever runs pip
        "$pip" install -q --disable-pip-version-check --no-deps \
            --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
            --platform manylinux2014_x86_64 --target "$out.tmp" \
            "awslambdaric==$AWSLAMBDARIC_VERSION" "simplejson==$SIMPLEJSON_VERSION" \
            "snapshot-restore-py==$SNAPSHOT_RESTORE_PY_VERSION" >&2
        rm -rf "$out" && mv "$out.tmp" "$out"
    fi
    echo "$out"
    ;;
esac
