#!/usr/bin/env bash
# The daemon restoring one function from the emulated NVMe tier (its fast
# snapshot tier) and the same function from the emulated remote tier (its
# slow one), cold invocations taking turns, 2 s apart (the previous
# instance gone); the snapshot's page cache on NVMe dropped before each. Prints each invocation's Server-Timing.
# Needs `thaw tier setup --tiers nvme,remote` under THAW_HOME first, and no
# other daemon on that home.
set -euo pipefail
T=${T:-target/release/thaw}
H=${THAW_HOME:-/var/lib/thaw}
N=${N:-15}
SOCK=$H/serve/thaw.sock
work=$(mktemp -d)
# idle instances live 1 s: each cold start finds none to give up first
# SERVE_ARGS: more flags for the daemon (e.g. --config with [limits] sandbox_pool = 1)
# shellcheck disable=SC2086
$T --home "$H" serve --snapshot-tiers nvme,remote --policy ttl --keep-alive-s 1 ${SERVE_ARGS:-} \
    > "${SERVE_LOG:-$work/serve.log}" 2>&1 &
PID=$!
trap 'kill $PID; wait $PID || true; rm -rf "$work"' EXIT
for _ in $(seq 300); do [ -S "$SOCK" ] && break; sleep 0.1; done
cat > "$work/hello.py" <<'PY'
import json
DATA = []
def init():
    DATA.extend(json.dumps({"k": i}) for i in range(2000))
def handler(event):
    return {"hello": (event or {}).get("name", "world"), "n": len(DATA)}
PY
for t in nvme remote; do
    $T --home "$H" fn rm "h-$t" >/dev/null 2>&1 || true
    $T --home "$H" fn deploy "$work/hello.py" --name "h-$t" --handler hello.handler --init hello.init \
        --strategy reap --tier "$t" --sample-event '{"name": "s"}' > /dev/null
done
drop_nvme_cache() {
    python3 - "$H" <<'PY'
import glob, os, sys
for f in glob.glob(sys.argv[1] + '/tiers/nvme/snapshots/h-nvme-*/**', recursive=True):
    if os.path.isfile(f):
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}
for _ in $(seq "$N"); do
    for t in nvme remote; do
        sleep 2
        drop_nvme_cache
        if err=$($T --home "$H" fn invoke "h-$t" --cold -v 2>&1 >/dev/null); then
            echo "$err" | tr -d '\r' | awk -v t="$t" 'tolower($0) ~ /server-timing|thaw-tier/ {print t, $0}'
        else
            echo "$t FAILED: $err"
        fi
    done
done
for t in nvme remote; do $T --home "$H" fn rm "h-$t" > /dev/null; done
