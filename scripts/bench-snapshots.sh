#!/usr/bin/env bash
# Snapshot benchmarks in one sitting (ADR 0026), on `basalt dev` (replication 3, three OSDs on
# files in DIR), each against the same kind of volume with no snapshot, alternated ROUNDS times:
#   - QD1 4 KiB reads through a chain whose data is all in the bottom layer, at depth 1, 16, 64;
#   - QD1 4 KiB writes right after a snapshot (the first write to most objects of the new head);
#   - snapshot create: wall time of each POST /snapshots and the longest write overlapping it,
#     fio writing at depth 4 through NBD meanwhile (SNAPSHOTS of them, one every 200 ms), and
#     the same statistic for windows as long 100 ms later (the disk's own floor for it).
# Prints medians and ratios; keeps raw results in OUT.
#
# Usage: scripts/bench-snapshots.sh [DIR]     (default /var/tmp; needs fio, python3)
# Env:   ROUNDS=3  RUNTIME=6  SNAPSHOTS=100  OUT=DIR  BASALT_BIN=PATH (a build to run)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-snapshot-bench
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-6}
snapshots=${SNAPSHOTS:-100}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
source scripts/lib/basalt-bin.sh
api=127.0.0.1:20080
nbd=127.0.0.1:20809

source scripts/lib/scratch.sh

"$basalt" dev --data "$dir/cluster" --nbd "$nbd" --api "$api" --meta-listen 127.0.0.1:20390 --osd-size 8G \
    --volume flat=1G --volume deep=1G --volume stall=1G >"$out/dev.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do grep -q ready "$out/dev.log" && break; sleep 0.2; done
grep -q ready "$out/dev.log" || { echo "bench-snapshots: basalt dev did not start; see $out/dev.log" >&2; exit 1; }
b() { "$basalt" -q "$@" --api "$api"; }
# Deep chains and a hundred snapshots of one volume are what is measured here.
b config set snapshot_chain_max 1024 >/dev/null

bench() { # volume rw file [more bench args]
    b bench --volume "$1" --rw "$2" --bs 4k --iodepth 1 --runtime "$runtime" --json "${@:4}" >"$out/$3.json"
}
# The data lives in the bottom layer of deep, and in flat's only layer.
for volume in flat deep; do
    b bench --volume "$volume" --rw randread --bs 4k --iodepth 1 --runtime 1 --ramp 0 --prefill --json >/dev/null
done
depth=0
for target in 1 16 64; do
    while ((depth < target)); do
        depth=$((depth + 1))
        b snapshot create "deep@d$depth" >/dev/null
    done
    echo "bench-snapshots: reads through a chain of depth $depth" >&2
    for round in $(seq 1 "$rounds"); do
        bench flat randread "read-flat-$depth-$round"
        bench deep randread "read-deep-$depth-$round"
    done
done
echo "bench-snapshots: first writes after a snapshot" >&2
# Over 512 MiB (4,096 objects), so most writes after a snapshot are the first to their object of
# the new head; each such object takes a data block of its own (the engine's unit), so the range
# bounds the space the rounds take.
for round in $(seq 1 "$rounds"); do
    bench flat randwrite "write-flat-$round" --size-limit 512M
    b snapshot create "deep@w$round" >/dev/null
    bench deep randwrite "write-deep-$round" --size-limit 512M
done

echo "bench-snapshots: $snapshots snapshots under writes at depth 4" >&2
# Over 16 MiB: every snapshot gives the volume a new head, whose objects the writes then fill.
fio --name=stall --ioengine=nbd --uri="nbd://$nbd/stall" --rw=randwrite --bs=4k --size=16M --iodepth=4 --time_based \
    --runtime=$((snapshots / 5 + 10)) --ramp_time=0 --write_lat_log="$out/stall" --log_avg_msec=0 \
    --log_unix_epoch=1 --output-format=json >"$out/stall-fio.json" &
fio_pid=$!
sleep 3
python3 - "$api" "$snapshots" "$out/creates.txt" <<'PY'
import json, sys, time, urllib.request
api, count, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, "w") as out:
    for n in range(count):
        body = json.dumps({"name": f"stall@s{n}"}).encode()
        request = urllib.request.Request(f"http://{api}/api/v1/snapshots", data=body, headers={"Content-Type": "application/json"})
        start = time.time_ns()
        with urllib.request.urlopen(request) as answer:
            assert answer.status == 201, answer.read()
        out.write(f"{start} {time.time_ns()}\n")
        time.sleep(0.2)
PY
wait "$fio_pid"

python3 - "$out" "$rounds" <<'PY'
import glob, json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
def lat(name):
    return json.load(open(f"{out}/{name}.json"))["lat_mean_us"]
print(f"{'workload':<44} {'no snapshot us':>14} {'with us':>9}   ratio   target")
for depth, target in [(1, 1.05), (16, 1.2), (64, 1.5)]:
    flat = med([lat(f"read-flat-{depth}-{r}") for r in range(1, rounds + 1)])
    deep = med([lat(f"read-deep-{depth}-{r}") for r in range(1, rounds + 1)])
    print(f"{'randread-4k-qd1, data at depth ' + str(depth):<44} {flat:>14.1f} {deep:>9.1f}   {deep / flat:.2f}x   at most {target}x")
flat = med([lat(f"write-flat-{r}") for r in range(1, rounds + 1)])
deep = med([lat(f"write-deep-{r}") for r in range(1, rounds + 1)])
print(f"{'randwrite-4k-qd1, right after a snapshot':<44} {flat:>14.1f} {deep:>9.1f}   {deep / flat:.2f}x   at most 1.05x")
creates = [tuple(map(int, line.split())) for line in open(f"{out}/creates.txt")]
ios = []  # (start ns, end ns, latency ns)
for path in glob.glob(f"{out}/stall_lat.*.log"):
    for line in open(path):
        fields = [field.strip() for field in line.split(",")]
        end_ns, latency_ns = int(fields[0]) * 1_000_000, int(fields[1])
        ios.append((end_ns - latency_ns, end_ns, latency_ns))
ios.sort()
walls = sorted((end - start) / 1e6 for start, end in creates)
def longest(start, end):
    # The longest write that was in flight at any time during [start, end] (1 ms of slack for
    # the log's millisecond timestamps).
    overlapping = [lat for io_start, io_end, lat in ios if io_start <= end + 1_000_000 and io_end >= start - 1_000_000]
    return max(overlapping, default=0) / 1e6
stalls = sorted(longest(start, end) for start, end in creates)
# The floor: the same statistic over windows as long, 100 ms after each call (halfway to the
# next), where no snapshot is taken: what the disk's own tail gives a window of that length.
floor = sorted(longest(start + 100_000_000, end + 100_000_000) for start, end in creates)
def p(values, q):
    return values[min(len(values) - 1, int(q * len(values)))]
all_lat = sorted(lat / 1e6 for _, _, lat in ios)
print(f"snapshot create, {len(creates)} under writes at QD4: wall time p50 {p(walls, 0.5):.1f} ms, p99 {p(walls, 0.99):.1f} ms, max {walls[-1]:.1f} ms (target p99 under 50 ms)")
print(f"longest write overlapping each: p50 {p(stalls, 0.5):.1f} ms, p99 {p(stalls, 0.99):.1f} ms (target p99 under 30 ms); every write: p50 {p(all_lat, 0.5):.2f} ms, p99 {p(all_lat, 0.99):.2f} ms, {len(all_lat)} writes")
print(f"floor, the same windows 100 ms later with no snapshot: p50 {p(floor, 0.5):.1f} ms, p99 {p(floor, 0.99):.1f} ms")
print(f"# basalt bench medians of {rounds} alternated rounds; replication 3 on one machine (basalt dev)")
PY
echo "bench-snapshots: raw results in $out" >&2
