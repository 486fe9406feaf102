#!/usr/bin/env bash
# The main job: set up the host, build thaw and the runtime root (cached by
# content hash), snapshot and restore the function suite, print a results table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -q -p thaw-cli
target/release/thaw demo "$@"
# the suite again, deployed through `thaw serve` like any user function
scripts/serve-demo.sh
