#!/usr/bin/env bash
# Reproduces the figures in docs/BENCHMARKS.md. Results (JSON lines and
# markdown tables) go to bench-results/ (override with OUT=dir). RUNS sets the
# repetitions (default 10). Takes about 30-60 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --remote
cargo build --release --locked -q -p thaw-cli
T=target/release/thaw
OUT=${OUT:-bench-results}
RUNS=${RUNS:-10}
mkdir -p "$OUT"
SUITE=helloworld,pyaes,chameleon,json_serdes,image_rotate,lr_serving,lr_training,matmul,compress,pagerank

# issue 2: the three basic backends, tmpfs and disk, against a fresh start
for tier in tmpfs disk; do
    $T bench restore --functions helloworld,lr_serving,lr_training,matmul --strategies eager,mmap,uffd \
        --tier $tier --runs "$RUNS" --redeploy --json "$OUT/restore-$tier.jsonl" --markdown "$OUT/restore-$tier.md"
done
# issue 4: every strategy over the suite, on the disk (REAP's target) and on tmpfs (dax, tiered)
$T bench restore --functions $SUITE --strategies mmap,uffd,reap --sizes I,III \
    --tier disk --runs "$RUNS" --redeploy --json "$OUT/strategies-disk.jsonl" --markdown "$OUT/strategies-disk.md"
$T bench restore --functions $SUITE --strategies mmap,reap,dax,tiered \
    --tier tmpfs --runs "$RUNS" --redeploy --json "$OUT/strategies-tmpfs.jsonl" --markdown "$OUT/strategies-tmpfs.md"
# Node.js functions beside their Python twins (fresh starts; restores where the checkpoint accepts Node)
$T bench restore --functions helloworld,node_helloworld,compress,node_compress --strategies mmap \
    --sizes I --runs "$((RUNS * 2))" --json "$OUT/node.jsonl" --markdown "$OUT/node.md"
# issue 11: what a sealed (unchangeable after verification) DRAM image costs on first use
$T bench store --functions helloworld,lr_serving,matmul --runs "$RUNS" --markdown "$OUT/store-seal.md"
# issue 14: N = 1..64 simultaneous cold starts per strategy, tier and mode
$T bench concurrency --function lr_serving --strategies eager,mmap,uffd,reap,dax --tiers tmpfs,disk \
    --reps 3 --json "$OUT/concurrency-lr_serving.jsonl" --markdown "$OUT/concurrency-lr_serving.md"
$T bench concurrency --function helloworld --strategies mmap,reap,dax --tiers tmpfs,disk \
    --reps 3 --json "$OUT/concurrency-helloworld.jsonl" --markdown "$OUT/concurrency-helloworld.md"
# issue 5: simulator throughput and the thesis direction
for i in 1 2 3; do
    $T sim --synthetic --functions 10000 --hours 2 --policy tiered-lru --seed 7 --ram-gb 256 --quiet --json "$OUT/sim-throughput-$i.json"
done
$T sim sweep --synthetic --functions 600 --hours 24 --seed 7 --policy lru-mem,tiered-lru --ram-gb 32,36,40,48 \
    --csv "$OUT/sim-sweep.csv"
# issue 14 part 3: simulated vs live (a 20-minute synthetic day through thaw sim and a live thaw serve)
$T bench simlive --out "$OUT/simlive"
# issue 13: the storage hierarchy (seed 000's study); emulated tiers are set up, probed, measured, torn down
$T tier setup
$T tier probe --json "$OUT/tier-probe.json"
# seed 000's method: 1st and 51st warm, readahead on/off, 1..64 concurrent cold starts, SVG plots in $OUT/hierarchy/
$T bench hierarchy --functions helloworld,json_serdes,lr_serving,pyaes,matmul --tiers tmpfs,pmem,nvme,sata,hdd \
    --strategies mmap,reap --runs "$RUNS" --redeploy --out "$OUT/hierarchy"
# REAP against mmap over the whole suite at size I (the REAP targets), page cache dropped before every run
$T bench hierarchy --functions helloworld,pyaes,chameleon,json_serdes,image_rotate,lr_serving,lr_training,matmul,compress,pagerank,float_operation,linpack \
    --tiers tmpfs,nvme,sata,hdd --strategies mmap,reap --runs "$RUNS" --warm-calls 1 --readahead on,off \
    --no-scaling --redeploy --out "$OUT/hierarchy-suite"
# the streamed restore from the remote tier against the same restore from NVMe
# (seed 000's light functions, its Table 3)
$T bench hierarchy --functions helloworld,lr_serving,pyaes --tiers nvme,remote \
    --strategies reap --runs "$RUNS" --json "$OUT/hierarchy-remote.jsonl" --markdown "$OUT/hierarchy-remote.md"
$T place --all --explain --profile-tier nvme > "$OUT/place.txt"
# the daemon with the remote as its slow snapshot tier, against NVMe as its fast one
T=$T scripts/bench-serve-tiers.sh > "$OUT/serve-tiers.txt"
$T tier teardown --force
# issue 12: the daemon against the worker it wraps
$T bench serve --json "$OUT/serve.json" --markdown "$OUT/serve.md"
echo "bench: results in $OUT/"
