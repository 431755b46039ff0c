#!/usr/bin/env bash
# Engine benchmark against the raw disk, in one sitting: alternates fio's raw-baseline.sh and
# `basalt engine bench` on the same filesystem ROUNDS times and prints the medians and ratios.
# Each round also runs fio's QD32 random write with an fdatasync after every 32 writes: the
# disk's rate for durable random writes, which bounds the engine's sustained QD32 write.
#
# Usage: scripts/bench-engine.sh [DIR]        (default /var/tmp; needs fio and jq)
# Env:   ROUNDS=3  RUNTIME=10  SPIN_US=0  OUT=DIR (keeps the raw results)
#        SIZE=1200M: the engine file; the bench uses 90% of its data blocks, about the 1 GiB
#        region fio uses, so both read the same share of the (host-cached) virtual disk
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/var/tmp}
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-10}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
rig=../shared/rig
source scripts/lib/durable-reference.sh
cargo build --release -p basalt >&2
workloads="randread-4k-qd1 randread-4k-qd32 randwrite-4k-qd1 randwrite-4k-qd1-fsync randwrite-4k-qd32"
for round in $(seq 1 "$rounds"); do
    echo "bench-engine: round $round of $rounds" >&2
    OUT_DIR="$out/raw-$round" RUNTIME=$runtime SIZE=1G WORKLOADS="$workloads" KEEP_FILE=1 \
        bash "$rig/raw-baseline.sh" "$dir" >"$out/raw-$round.txt"
    # The durable reference for the QD32 write: the same random writes on the same file.
    durable_qd32_reference "$dir/rig-raw-baseline.fio" "$runtime" "$out/raw-$round/randwrite-4k-qd32-fdatasync32.json"
    rm -f "$dir/rig-raw-baseline.fio"
    target/release/basalt -q engine bench --data "$dir/basalt-bench.img" --size "${SIZE:-1200M}" --runtime "$runtime" \
        --spin-us "${SPIN_US:-0}" --json --workloads randread-4k-qd1,randread-4k-qd32,randwrite-4k-qd1,randwrite-4k-qd32 \
        >"$out/engine-$round.json"
done
rm -f "$dir/basalt-bench.img"
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def fio(round_, name):
    job = json.load(open(f"{out}/raw-{round_}/{name}.json"))["jobs"][0]
    d = job["write"] if job["write"]["io_bytes"] > 0 else job["read"]
    lat = d["lat_ns"]["mean"] / 1000
    sync = job.get("sync", {})
    if sync.get("total_ios", 0) > 0:
        lat += sync["lat_ns"]["mean"] / 1000  # per-operation time includes the fsync
    return d["iops"], lat, d["lat_ns"].get("percentile", {}).get("99.000000", 0) / 1000
def engine(round_, name):
    rows = {row["workload"]: row for row in json.load(open(f"{out}/engine-{round_}.json"))}
    r = rows[name]
    return r["iops"], r["lat_mean_us"], r["lat_p99_us"]
def med(values): return statistics.median(values)
rows = [
    ("randread-4k-qd1", "randread-4k-qd1", "latency"),
    ("randread-4k-qd32", "randread-4k-qd32", "iops"),
    ("randwrite-4k-qd1", "randwrite-4k-qd1-fsync", "latency"),
    ("randwrite-4k-qd32", "randwrite-4k-qd32", "iops"),
]
print(f"{'workload':<20} {'engine IOPS':>12} {'mean us':>9} {'p99 us':>8}   {'raw workload':<24} {'raw IOPS':>9} {'mean us':>9} {'p99 us':>8}   ratio")
for ours, raw, kind in rows:
    e = [engine(r, ours) for r in range(1, rounds + 1)]
    f = [fio(r, raw) for r in range(1, rounds + 1)]
    ei, el, ep = med([x[0] for x in e]), med([x[1] for x in e]), med([x[2] for x in e])
    fi, fl, fp = med([x[0] for x in f]), med([x[1] for x in f]), med([x[2] for x in f])
    ratio = f"latency {el / fl:.2f}x" if kind == "latency" else f"IOPS {ei / fi:.2f}x"
    if raw.endswith("-fsync"):
        # fio's mean write and fsync latencies overlap its queueing; the time per operation is
        # the stricter comparison.
        ratio += f", time per op {fi / ei:.2f}x"
    print(f"{ours:<20} {ei:>12.0f} {el:>9.1f} {ep:>8.0f}   {raw:<24} {fi:>9.0f} {fl:>9.1f} {fp:>8.0f}   {ratio}")
durable = med([fio(r, "randwrite-4k-qd32-fdatasync32")[0] for r in range(1, rounds + 1)])
engine_qd32 = med([engine(r, "randwrite-4k-qd32")[0] for r in range(1, rounds + 1)])
print(f"{'':<20} {'':>12} {'':>9} {'':>8}   {'...-fdatasync32':<24} {durable:>9.0f} {'':>9} {'':>8}   "
      f"IOPS {engine_qd32 / durable:.2f}x (fio made durable every 32 writes)")
print(f"# medians of {rounds} rounds; raw fsync row: mean latency = write + fsync per operation")
PY
echo "bench-engine: raw results in $out" >&2
