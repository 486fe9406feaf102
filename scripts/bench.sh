#!/usr/bin/env bash
# Reproduces the figures in docs/BENCHMARKS.md, topic by topic. Results go
# to bench-results/TOPIC/ (override the root with OUT=dir), named as in
# docs/results/TOPIC-DATE/. RUNS sets the repetitions where a section does
# not fix them (default 10). Takes one to two hours on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
cargo build --release --locked -q -p thaw-cli
T=target/release/thaw
OUT=${OUT:-bench-results}
RUNS=${RUNS:-10}
SUITE=helloworld,pyaes,chameleon,json_serdes,image_rotate,lr_serving,lr_training,matmul,compress,pagerank
mkdir -p "$OUT"/{floor,restore-suite,tmp-files,strategies-disk,strategies-tmpfs,tiered-pmem,store-seal,concurrency-pass,concurrency-sweep,sim,tier-probe,placement,serve-tiers,serve,xdt}

# Restore against a fresh start, and the zygote floor (a fork of a live template)
$T bench restore --functions helloworld,lr_serving,matmul --strategies mmap,dax --start-types fresh,zygote \
    --tier tmpfs --runs 20 --redeploy --json "$OUT/floor/floor.jsonl" --markdown "$OUT/floor/floor.md"
# Every function and strategy against a fresh start: DRAM, and the real disk at sizes I and III
$T bench restore --functions $SUITE --strategies eager,mmap,uffd,reap,dax,tiered --tier tmpfs --runs "$RUNS" --redeploy \
    --json "$OUT/restore-suite/tmpfs.jsonl" --markdown "$OUT/restore-suite/tmpfs.md"
$T bench restore --functions $SUITE --strategies mmap,uffd,reap --sizes I,III --tier disk --runs "$RUNS" --redeploy \
    --json "$OUT/strategies-disk/strategies.jsonl" --markdown "$OUT/strategies-disk/strategies.md"
# dax (PASS) and tiered (TOSS) on tmpfs: faults, first response, DRAM per clone, slow-tier share
$T bench restore --functions $SUITE --strategies mmap,reap,dax,tiered --tier tmpfs --runs "$RUNS" --redeploy \
    --json "$OUT/strategies-tmpfs/strategies.jsonl" --markdown "$OUT/strategies-tmpfs/strategies.md"
# a snapshot's /tmp: 50 MiB of files written at init, recreated before resume
$T bench restore --functions _test_tmp_cache,helloworld --strategies mmap,reap,eager --tier tmpfs --runs "$RUNS" \
    --json "$OUT/tmp-files/tmp50.json" --markdown "$OUT/tmp-files/tmp50.md"
# what a sealed (unchangeable after verification) DRAM image costs on first use
$T bench store --functions helloworld,lr_serving,matmul --runs "$RUNS" --markdown "$OUT/store-seal/store-seal.md"
# Node.js functions beside their Python twins (fresh starts; restores where the checkpoint accepts Node)
mkdir -p "$OUT/node"
$T bench restore --functions helloworld,node_helloworld,compress,node_compress --strategies mmap \
    --sizes I --runs "$((RUNS * 2))" --json "$OUT/node/node.jsonl" --markdown "$OUT/node/node.md"

# Concurrency: N = 1..64 simultaneous cold starts per strategy, tier and mode
$T bench concurrency --function lr_serving --strategies eager,mmap,uffd,reap,dax --tiers tmpfs,disk \
    --reps 3 --json "$OUT/concurrency-sweep/concurrency-lr_serving.jsonl" --markdown "$OUT/concurrency-sweep/concurrency-lr_serving.md"
$T bench concurrency --function helloworld --strategies mmap,reap,dax --tiers tmpfs,disk \
    --reps 3 --json "$OUT/concurrency-sweep/concurrency-helloworld.jsonl" --markdown "$OUT/concurrency-sweep/concurrency-helloworld.md"

# Simulator: throughput on one core, and the direction of "Reducing FaaS Latency with Storage-backed Caching"
for i in 1 2 3; do
    taskset -c 1 $T sim --synthetic --functions 10000 --hours 2 --policy tiered-lru --seed 7 --ram-gb 256 --quiet \
        --json "$OUT/sim/sim-throughput-$i.json"
done
$T sim sweep --synthetic --functions 600 --hours 24 --seed 7 --policy lru-mem,tiered-lru --ram-gb 32,36,40,48 \
    --csv "$OUT/sim/sim-sweep.csv"
# Simulated against live: a 20-minute synthetic day through thaw sim and a live thaw serve
$T bench simlive --out "$OUT/simlive"

# Storage hierarchy ("FaaS in the Age of (sub-)µs I/O"): emulated tiers set up, probed, measured, torn down
$T tier setup
$T tier probe --tiers nvme,sata,hdd --mib 64 --reads 128 --json "$OUT/tier-probe/tier-probe.json"
# PASS's comparison: dax from the byte-addressable tier against mmap and reap from the disk
$T bench concurrency --function lr_serving --strategies mmap,reap,dax --tiers pmem,disk --modes different \
    --levels 16,64 --reps 3 --json "$OUT/concurrency-pass/concurrency.jsonl" --markdown "$OUT/concurrency-pass/concurrency.md"
# TOSS as the paper ran it: the slow file on (emulated) pmem, mapped in place; then on the disk
for slow in pmem disk; do
    $T bench restore --functions lr_serving,chameleon,pyaes,matmul --strategies mmap,dax,tiered \
        --tier tmpfs --slow $slow --runs "$RUNS" --redeploy --json "$OUT/tiered-pmem/$slow.jsonl" --markdown "$OUT/tiered-pmem/$slow.md"
done
# the study's whole method: 1st and 51st warm, readahead on/off, 1..64 concurrent cold starts, SVG plots
$T bench hierarchy --functions helloworld,json_serdes --tiers tmpfs,pmem,nvme,sata --out "$OUT/hierarchy-study"
# REAP against mmap over the whole suite at size I (the REAP targets), page cache dropped before every run
$T bench hierarchy --functions $SUITE,float_operation,linpack --tiers sata,hdd --strategies mmap,reap --runs 5 \
    --warm-calls 1 --readahead on,off --no-scaling --redeploy --out "$OUT/hierarchy-suite"
# NVMe against DRAM for the study's light functions (its Table 3)
$T bench hierarchy --functions helloworld,lr_serving,pyaes --tiers tmpfs,nvme,sata,hdd --strategies mmap,reap \
    --runs "$RUNS" --warm-calls 1 --readahead on --no-scaling --redeploy --out "$OUT/hierarchy-light"
# the streamed restore from the remote tier against the same restore from NVMe
$T bench hierarchy --functions helloworld,lr_serving,pyaes --tiers nvme,remote --strategies reap \
    --runs "$RUNS" --warm-calls 1 --readahead on --no-scaling --redeploy --out "$OUT/remote"
$T place --all --explain --profile-tier nvme > "$OUT/placement/place.txt"
# the daemon with the remote as its slow snapshot tier, against NVMe as its fast one
T=$T scripts/bench-serve-tiers.sh > "$OUT/serve-tiers/invocations.txt"
$T tier teardown --force

# The daemon against the worker it wraps
$T bench serve --restore-runs 60 --json "$OUT/serve/serve.json" --markdown "$OUT/serve/serve.md"
# Placement's estimates, at deploy and recalibrated, against the restores the daemon serves
$T bench estimates --runs 40 --json "$OUT/serve/estimates.json" --markdown "$OUT/serve/estimates.md"
# Lambda's API through boto3 against thaw's own, cold and warm
mkdir -p "$OUT/lambda"
$T bench lambda --cold-runs 40 --seconds 20 --json "$OUT/lambda/lambda.json" --markdown "$OUT/lambda/lambda.md"
# XDT: by reference, inline, through the object store and across two workers; patterns; applications
$T bench xdt --sizes 10000,1000000,10000000,100000000 --runs 20 --degrees 1 --pattern-runs 1 --app-runs 3 \
    --json "$OUT/xdt/xdt.json" --markdown "$OUT/xdt/xdt.md"
# Pods through CRI: runc against thaw, pods at once, a node restoring another node's snapshot
# (the shim, and thaw-bench-kube, which `thaw bench cri` runs)
cargo build --release --locked -q -p thaw-shim -p thaw-bench-kube
mkdir -p "$OUT/cri"
$T bench cri --runs "$RUNS" --json "$OUT/cri/cri.json" --markdown "$OUT/cri/cri.md"
echo "bench: results in $OUT/"
