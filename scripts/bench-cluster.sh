#!/usr/bin/env bash
# Cluster benchmark against the raw disk, in one sitting: a mon on the embedded store and three
# OSDs on files in DIR (replication 3, all on this machine), `basalt bench` through the client
# library, alternating with fio's raw-baseline.sh on the same filesystem, ROUNDS times.
# Prints medians, ratios to the raw disk, the OSDs' CPU seconds per 10,000 IOPS, the disk's
# floor for three durable copies at once (`basalt engine sync-floor`), which all replicas share,
# alone and behind the two round trips of a replicated write,
# the floor for a QD1 read (`basalt engine read-floor`: the disk behind one local round trip),
# and fio's durable QD32 reference (an fdatasync after every 32 writes).
#
# Usage: scripts/bench-cluster.sh [DIR]        (default /var/tmp; needs fio and jq)
# Env:   ROUNDS=3  RUNTIME=10  OUT=DIR (keeps the raw results)  OSD_SIZE=2G  SPIN_US=0  BASALT_BIN=PATH (a build to run)
#        LOCAL_SOCKETS=1: each OSD also serves on a Unix socket in DIR, which the bench client and
#        the other OSDs (all on this machine) use; 0 keeps every connection on TCP (ADR 0013)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-cluster-bench
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-10}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
rig=$(cd ../shared/rig && pwd)
source scripts/lib/basalt-bin.sh
source scripts/lib/durable-reference.sh
api=127.0.0.1:18080
meta=127.0.0.1:12390

source scripts/lib/scratch.sh

"$basalt" mon --embedded "$dir/meta" --meta-listen "$meta" --api "$api" >"$out/mon.log" 2>&1 &
pids+=($!)
osd_pids=()
for i in 0 1 2; do
    "$basalt" -q osd init --data "$dir/osd$i.img" --size "${OSD_SIZE:-2G}" >&2
    local_socket=()
    [[ "${LOCAL_SOCKETS:-1}" == 1 ]] && local_socket=(--local-socket "$dir/osd$i.sock")
    "$basalt" osd --etcd "basalt://$meta" --data "$dir/osd$i.img" --listen "127.0.0.$((i + 2)):16800" \
        --host "host$i" --spin-us "${SPIN_US:-0}" "${local_socket[@]}" >"$out/osd$i.log" 2>&1 &
    pids+=($!)
    osd_pids+=($!)
done
for _ in $(seq 1 100); do
    up=$("$basalt" osd ls --api "$api" --json 2>/dev/null | jq '[.osds[] | select(.up)] | length' 2>/dev/null || echo 0)
    [[ "$up" == 3 ]] && break
    sleep 0.2
done
[[ "$up" == 3 ]] || { echo "bench-cluster: OSDs did not come up; logs in $out" >&2; exit 1; }
"$basalt" -q pool create bench --replicas 3 --min-size 2 --pgs 64 --api "$api" >/dev/null
"$basalt" -q volume create bench --size 1G --pool bench --api "$api" >/dev/null
sleep 1

# utime + stime of the OSD processes, in clock ticks.
osd_ticks() {
    local total=0 pid
    for pid in "${osd_pids[@]}"; do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}

# Write the whole volume first: reads of never written ranges return zeros without touching a drive.
"$basalt" -q bench --api "$api" --volume bench --rw randread --bs 4k --iodepth 1 --runtime 1 --ramp 0 --prefill --json \
    >"$out/prefill.json"
workloads="randread-4k-qd1 randread-4k-qd32 randwrite-4k-qd1 randwrite-4k-qd1-fsync randwrite-4k-qd32"
for round in $(seq 1 "$rounds"); do
    echo "bench-cluster: round $round of $rounds" >&2
    OUT_DIR="$out/raw-$round" RUNTIME=$runtime SIZE=1G WORKLOADS="$workloads" KEEP_FILE=1 \
        bash "$rig/raw-baseline.sh" "$base" >"$out/raw-$round.txt"
    durable_qd32_reference "$base/rig-raw-baseline.fio" "$runtime" "$out/raw-$round/randwrite-4k-qd32-fdatasync32.json"
    rm -f "$base/rig-raw-baseline.fio"
    "$basalt" -q engine sync-floor --dir "$base" --writers 3 --runtime "$runtime" --json >"$out/floor-$round.json"
    "$basalt" -q engine read-floor --dir "$base" --runtime "$(( runtime < 5 ? 5 : runtime ))" --json >"$out/read-floor-$round.json"
    for spec in "randwrite 1" "randread 1" "randread 32" "randwrite 32"; do
        read -r rw qd <<<"$spec"
        before=$(osd_ticks)
        "$basalt" -q bench --api "$api" --volume bench --rw "$rw" --bs 4k --iodepth "$qd" --runtime "$runtime" --json \
            >"$out/basalt-$round-$rw-$qd.json"
        after=$(osd_ticks)
        echo "$((after - before))" >"$out/basalt-$round-$rw-$qd.ticks"
    done
done
python3 - "$out" "$rounds" "$runtime" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
out, rounds, runtime, hz = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
def fio(r, name):
    job = json.load(open(f"{out}/raw-{r}/{name}.json"))["jobs"][0]
    d = job["write"] if job["write"]["io_bytes"] > 0 else job["read"]
    lat = d["lat_ns"]["mean"] / 1000
    sync = job.get("sync", {})
    if sync.get("total_ios", 0) > 0:
        lat += sync["lat_ns"]["mean"] / 1000
    return d["iops"], lat, d["lat_ns"].get("percentile", {}).get("99.000000", 0) / 1000
def ours(r, rw, qd):
    row = json.load(open(f"{out}/basalt-{r}-{rw}-{qd}.json"))
    ticks = int(open(f"{out}/basalt-{r}-{rw}-{qd}.ticks").read())
    cpu_s = ticks / hz
    per_10k = cpu_s / (row["iops"] * runtime / 10000) if row["iops"] else float("nan")
    return row["iops"], row["lat_mean_us"], row["lat_p99_us"], per_10k
med = statistics.median
rows = [("randwrite", 1, "randwrite-4k-qd1-fsync", "time per op"), ("randread", 1, "randread-4k-qd1", "latency"),
        ("randread", 32, "randread-4k-qd32", "iops"), ("randwrite", 32, "randwrite-4k-qd32", "iops")]
print(f"{'workload':<20} {'IOPS':>8} {'mean us':>8} {'p99 us':>8} {'OSD cpu s/10k IO':>17}   {'raw workload':<24} {'IOPS':>8} {'mean us':>8}   ratio")
for rw, qd, raw, kind in rows:
    o = [ours(r, rw, qd) for r in range(1, rounds + 1)]
    f = [fio(r, raw) for r in range(1, rounds + 1)]
    oi, ol, op, oc = (med([x[i] for x in o]) for i in range(4))
    fi, fl = med([x[0] for x in f]), med([x[1] for x in f])
    if kind == "time per op":
        ratio = f"time per op {fi / oi:.2f}x raw (mean latency {ol / fl:.2f}x)"
    elif kind == "latency":
        ratio = f"latency {ol / fl:.2f}x raw"
    else:
        ratio = f"IOPS {oi / fi:.2f}x raw"
    print(f"{rw}-4k-qd{qd:<10} {oi:>8.0f} {ol:>8.1f} {op:>8.0f} {oc:>17.2f}   {raw:<24} {fi:>8.0f} {fl:>8.1f}   {ratio}")
floors = [json.load(open(f"{out}/floor-{r}.json")) for r in range(1, rounds + 1)]
one, lockstep = med([x["one_writer_us"] for x in floors]), med([x["lockstep_us"] for x in floors])
write_us = 1e6 / med([ours(r, "randwrite", 1)[0] for r in range(1, rounds + 1)])
replicated = med([x["replicated_us"] for x in floors])
print(f"disk floor (basalt engine sync-floor): 3 durable 4k writes at once {lockstep:.0f} us, one alone {one:.0f} us: "
      f"{lockstep / one:.2f}x before any network hop; Basalt's QD1 write takes {write_us:.0f} us, {write_us / lockstep:.2f}x that floor")
print(f"replicated-write floor (the same 3 copies behind a client's and a primary's round trips between blocking threads): "
      f"{replicated:.0f} us; Basalt's QD1 write {write_us / replicated:.2f}x that")
read_floors = [json.load(open(f"{out}/read-floor-{r}.json")) for r in range(1, rounds + 1)]
read_floor, trip = med([x["floor_us"] for x in read_floors]), med([x["round_trip_one_cpu_us"] for x in read_floors])
read_us = med([ours(r, "randread", 1)[1] for r in range(1, rounds + 1)])
print(f"read floor (basalt engine read-floor): the disk behind one local round trip {read_floor:.1f} us (the round trip alone "
      f"{trip:.1f} us on one CPU); Basalt's QD1 read takes {read_us:.1f} us, {read_us / read_floor:.2f}x that floor")
durable = med([fio(r, "randwrite-4k-qd32-fdatasync32")[0] for r in range(1, rounds + 1)])
qd32_write = med([ours(r, "randwrite", 32)[0] for r in range(1, rounds + 1)])
print(f"durable QD32 reference (fio, an fdatasync after every 32 writes, one copy): {durable:.0f} IOPS; "
      f"Basalt's QD32 write (three durable copies) {qd32_write:.0f} IOPS, {qd32_write / durable:.2f}x")
print(f"# medians of {rounds} rounds, {runtime:.0f} s each; replication 3 on one machine; raw = fio on a file in the same filesystem")
PY
echo "bench-cluster: raw results in $out" >&2
