#!/usr/bin/env bash
# The suite as user functions: start `thaw serve` on a throw-away state home,
# deploy suite functions through the HTTP API like any user's code, invoke
# each with its size-I input (checked by the function's checker), then again
# (a warm start), remove them and stop the daemon with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
T=target/release/thaw
runtime_home=${THAW_HOME:-/var/lib/thaw}
root=$($T runtime build | awk '/^path /{print $2}')
home=$(mktemp -d /tmp/thaw-serve-demo.XXXXXX)
$T --home "$home" serve --runtime-home "$runtime_home" 2>"$home.log" &
pid=$!
cleanup() {
    kill -TERM "$pid" 2>/dev/null && wait "$pid" || true
    # the home's DRAM tier is a tmpfs the daemon mounted
    if mountpoint -q "$home/dram"; then umount "$home/dram"; fi
    rm -rf "$home" "$home.log"
}
trap cleanup EXIT
for _ in $(seq 600); do
    [ -S "$home/serve/thaw.sock" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$home.log"; exit 1; }
    sleep 0.1
done
printf '%-16s %-8s %-10s %s\n' function start check server-timing
# (suite files named after their library, e.g. pyaes.py, would shadow it as
# a user module: those stay with `thaw demo`)
for f in helloworld json_serdes matmul float_operation; do
    name=${f//_/-}
    $T --home "$home" fn deploy "runtime/functions/$f.py" --handler "$f.handler" --name "$name" >/dev/null
    for round in 1 2; do
        out=$($T --home "$home" fn invoke "$name" --data "@$root/opt/thaw/inputs/$f/I.json" -v 2>"$home/hdr")
        check=$(echo "$out" | $T runtime check "$f" I >/dev/null 2>&1 && echo ok || echo FAILED)
        start=$(awk '/^thaw-start-type:/ {print $2}' "$home/hdr")
        timing=$(sed -n 's/^server-timing: //p' "$home/hdr")
        printf '%-16s %-8s %-10s %s\n' "$name" "$start" "$check" "$timing"
        [ "$check" = ok ]
    done
    $T --home "$home" fn rm "$name" >/dev/null
done
