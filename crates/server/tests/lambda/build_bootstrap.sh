#!/usr/bin/env bash
# Builds a test function's `bootstrap` (go-hello: aws-lambda-go; rust-hello:
# lambda_runtime; versions pinned in their go.mod / Cargo.toml and lock
# files) once, into a cache keyed by its sources, and prints its path.
# Usage: build_bootstrap.sh go-hello|rust-hello
set -euo pipefail
name=${1:?usage: build_bootstrap.sh go-hello|rust-hello}
src=$(cd "$(dirname "$0")/$name" && pwd)
key=$(cd "$src" && find . -type f ! -path './target/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
cache=${THAW_BOOTSTRAP_CACHE:-$HOME/.cache/thaw/bootstraps}
out=$cache/$name-$key
mkdir -p "$cache"
exec 9>"$cache/$name.lock"
flock 9
if [ ! -x "$out/bootstrap" ]; then
    work=$(mktemp -d "$cache/$name.build.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    cp -r "$src"/. "$work/src"
    case $name in
    go-hello)
        command -v go >/dev/null || { echo "go is not installed (scripts/setup.sh --tests)" >&2; exit 1; }
        # aws-lambda-go 1.55 needs Go 1.26: a Go >= 1.21 fetches it (GOTOOLCHAIN=auto)
        case $(go env GOVERSION) in
        go1.1[0-9]* | go1.20*) echo "$(go env GOVERSION) is too old to fetch Go 1.26 (GOTOOLCHAIN needs Go >= 1.21)" >&2; exit 1 ;;
        esac
        (cd "$work/src" && CGO_ENABLED=0 GOTOOLCHAIN=auto GOFLAGS=-mod=readonly go build -trimpath -o "$work/bootstrap" .) >&2
        ;;
    rust-hello)
        (cd "$work/src" && CARGO_TARGET_DIR="$cache/rust-target" cargo build --release --locked) >&2
        cp "$cache/rust-target/release/bootstrap" "$work/bootstrap"
        ;;
    *) echo "unknown test function $name" >&2; exit 1 ;;
    esac
    mkdir -p "$out.tmp" && mv "$work/bootstrap" "$out.tmp/bootstrap" && rm -rf "$out" && mv "$out.tmp" "$out"
fi
echo "$out/bootstrap"
