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
#   lambda-tools.sh nodejs-ric    Lambda's Node.js runtime interface client
#                                 (npm's aws-lambda-ric, its native part built
#                                 here): a directory holding
#                                 node_modules/aws-lambda-ric, what a
#                                 function's zip carries of it
#
# scripts/setup.sh --tests runs all three; `thaw bench lambda` and the Lambda
# tests call it again (a no-op once cached).
set -euo pipefail
# The emulator's releases are tagged v1.NN, which Go does not take as module
# versions; this pseudo-version names its commit of 2026-10-30.
RIE_VERSION=v0.0.0-20261030222936-bef5c4ba774d
AWSLAMBDARIC_VERSION=4.2.2
# its dependencies, pinned too (installed with --no-deps)
SIMPLEJSON_VERSION=4.3.0
SNAPSHOT_RESTORE_PY_VERSION=1.0.0
# the last release for Node.js 18, the runtime root's (4.x wants 22)
AWS_LAMBDA_RIC_NODE_VERSION=3.3.0

what=${1:?usage: lambda-tools.sh rie|awslambdaric|nodejs-ric}
case $what in rie | awslambdaric | nodejs-ric) ;; *) echo "unknown tool $what (rie, awslambdaric or nodejs-ric)" >&2; exit 1 ;; esac
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
nodejs-ric)
    out=$cache/aws-lambda-ric-node-$AWS_LAMBDA_RIC_NODE_VERSION
    ric=node_modules/aws-lambda-ric
    if [ ! -f "$out/$ric/dist/rapid-client.node" ]; then
        # its install scripts build curl and aws-lambda-cpp from the sources
        # in its package, then its Node-API addon against the host's Node
        # headers (Node-API is stable across versions: the root's Node 18
        # loads it); npm would skip those scripts, so they run by hand
        for t in node npm cmake autoreconf libtoolize make g++; do
            command -v $t >/dev/null || { echo "$t is not installed (scripts/setup.sh --tests)" >&2; exit 1; }
        done
        [ -f /usr/include/node/node_api.h ] || { echo "Node.js headers are not in /usr/include/node" >&2; exit 1; }
        echo "lambda-tools: building aws-lambda-ric $AWS_LAMBDA_RIC_NODE_VERSION for Node.js (npm and its own sources, once, about 2 minutes)" >&2
        rm -rf "$out.tmp"
        mkdir -p "$out.tmp/build"
        (
            cd "$out.tmp/build"
            echo '{"name": "ric-build", "version": "1.0.0", "private": true}' >package.json
            npm install -q --ignore-scripts --no-audit --no-fund "aws-lambda-ric@$AWS_LAMBDA_RIC_NODE_VERSION"
            cd "$ric"
            ./scripts/preinstall.sh
            ../.bin/node-gyp rebuild --nodedir=/usr
        ) >&2
        # what runs: the package's entry points and the addon
        mkdir -p "$out.tmp/$ric/bin" "$out.tmp/$ric/dist"
        cp "$out.tmp/build/$ric/package.json" "$out.tmp/$ric/"
        cp "$out.tmp/build/$ric/bin/index.mjs" "$out.tmp/$ric/bin/"
        cp "$out.tmp/build/$ric/dist/index.mjs" "$out.tmp/build/$ric/build/Release/rapid-client.node" "$out.tmp/$ric/dist/"
        rm -rf "$out.tmp/build"
        rm -rf "$out" && mv "$out.tmp" "$out"
    fi
    echo "$out"
    ;;
esac
