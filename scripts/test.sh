#!/usr/bin/env bash
# The test command: set up the host, check formatting, lints and the daemon's
# import layers, build the runtime root (cached), run every test of the
# workspace as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
cargo fmt --all -- --check
cargo clippy --release --locked --workspace --all-targets -q -- -D warnings
# the daemon's files import each other in layers (no cycle over 2 files)
scripts/import_cycles.py crates/server/src >/dev/null
# the shim too: crates/kube-harness's tests run it under containerd, and
# cargo builds no other package's binary for them
cargo build --release --locked -q -p thaw-cli -p thaw-shim
target/release/thaw runtime build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --release --locked --workspace --lib --bins --tests --no-fail-fast 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# one closing line over all test binaries
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$rc"
