#!/usr/bin/env bash
# NBD benchmark in one sitting: ../shared/rig/fio-suite.sh against `basalt dev`'s export
# (replication 3, three OSDs on files in DIR), against qemu-nbd serving a file in the same
# filesystem (no network hop, no replication), and raw-baseline.sh on that filesystem, ROUNDS
# times each, alternating; then pgbench on a Basalt volume, on `nbdkit memory` through the same
# nbdfuse + loop chain, and in a local directory. Prints medians and ratios, and the disk's
# floor for three durable copies at once (`basalt engine sync-floor`). With REP1=1 (the default)
# every Basalt run is repeated on a volume of a pool with one copy, on the same OSDs: the stack's
# own cost without the three copies that share this machine's one disk.
#
# Usage: scripts/bench-nbd.sh [DIR]        (default /var/tmp; as root; needs the rig's tools)
# Env:   ROUNDS=3  RUNTIME=10  SIZE=1G  PGBENCH=1 (0 skips pgbench)  PGBENCH_TIME=30
#        PGBENCH_SCALE=20  SPIN_US=0  REP1=1  OUT=DIR (keeps the raw results)  BASALT_BIN=PATH (a build to run)
#        CLIENT_SPIN_US=N: the gateway's `--client-spin-us` (unset: `basalt dev`'s default)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-nbd-bench
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-10}
size=${SIZE:-1G}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
rig=$(cd ../shared/rig && pwd)
source scripts/lib/basalt-bin.sh
nbd_basalt=127.0.0.1:20809
nbd_qemu=127.0.0.1:20810
nbd_memory=127.0.0.1:20811

source scripts/lib/scratch.sh

"$basalt" dev --data "$dir/cluster" --nbd "$nbd_basalt" --api 127.0.0.1:20080 --meta-listen 127.0.0.1:20390 \
    --osd-size 6G --volume "bench=$size" --volume pg=4G --spin-us "${SPIN_US:-0}" \
    ${CLIENT_SPIN_US:+--client-spin-us "$CLIENT_SPIN_US"} >"$out/dev.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do grep -q ready "$out/dev.log" && break; sleep 0.2; done
grep -q ready "$out/dev.log" || { echo "bench-nbd: basalt dev did not start; see $out/dev.log" >&2; exit 1; }
rep1=${REP1:-1}
if [[ $rep1 == 1 ]]; then
    api=(--api 127.0.0.1:20080)
    "$basalt" -q pool create one --replicas 1 --failure-domain osd "${api[@]}" >/dev/null
    "$basalt" -q volume create bench1 --size "$size" --pool one "${api[@]}" >/dev/null
    "$basalt" -q volume create pg1 --size 4G --pool one "${api[@]}" >/dev/null
    # The gateway learns of new volumes from the map: wait until it serves them.
    for export in bench1 pg1; do
        for _ in $(seq 1 100); do nbdinfo --size "nbd://$nbd_basalt/$export" >/dev/null 2>&1 && break; sleep 0.1; done
        nbdinfo --size "nbd://$nbd_basalt/$export" >/dev/null || { echo "bench-nbd: no export $export" >&2; exit 1; }
    done
fi

qemu_file=$dir/qemu-nbd.img
fallocate -l "$size" "$qemu_file"
dd if=/dev/zero of="$qemu_file" bs=1M count=$(( $(numfmt --from=iec "$size") >> 20 )) oflag=direct status=none
qemu-nbd -f raw --cache=none --aio=native -t -e 16 -b 127.0.0.1 -p "${nbd_qemu##*:}" -x ref "$qemu_file" &
pids+=($!)
sleep 1

workloads="randread-4k-qd1 randread-4k-qd32 randwrite-4k-qd1 randwrite-4k-qd1-fsync randwrite-4k-qd32"
for round in $(seq 1 "$rounds"); do
    echo "bench-nbd: round $round of $rounds" >&2
    OUT_DIR="$out/basalt-$round" RUNTIME=$runtime SIZE=$size WORKLOADS="$workloads" \
        bash "$rig/fio-suite.sh" "nbd://$nbd_basalt/bench" >"$out/basalt-$round.txt"
    if [[ $rep1 == 1 ]]; then
        OUT_DIR="$out/rep1-$round" RUNTIME=$runtime SIZE=$size WORKLOADS="$workloads" \
            bash "$rig/fio-suite.sh" "nbd://$nbd_basalt/bench1" >"$out/rep1-$round.txt"
    fi
    OUT_DIR="$out/qemu-$round" RUNTIME=$runtime SIZE=$size WORKLOADS="$workloads" \
        bash "$rig/fio-suite.sh" "nbd://$nbd_qemu/ref" >"$out/qemu-$round.txt"
    OUT_DIR="$out/raw-$round" RUNTIME=$runtime SIZE=$size WORKLOADS="$workloads" \
        bash "$rig/raw-baseline.sh" "$base" >"$out/raw-$round.txt"
    "$basalt" -q engine sync-floor --dir "$base" --writers 3 --runtime "$runtime" --json >"$out/floor-$round.json"
done

if [[ "${PGBENCH:-1}" == 1 ]]; then
    nbdkit -f -i 127.0.0.1 -p "${nbd_memory##*:}" memory 4G &
    pids+=($!)
    sleep 1
    export PGBENCH_TIME=${PGBENCH_TIME:-30} PGBENCH_SCALE=${PGBENCH_SCALE:-20}
    for round in $(seq 1 "$rounds"); do
        bash "$rig/pgbench-on-nbd.sh" "nbd://$nbd_basalt/pg" >"$out/pg-basalt-$round.txt" 2>&1
        if [[ $rep1 == 1 ]]; then
            bash "$rig/pgbench-on-nbd.sh" "nbd://$nbd_basalt/pg1" >"$out/pg-rep1-$round.txt" 2>&1
        fi
        bash "$rig/pgbench-on-nbd.sh" "nbd://$nbd_memory/" >"$out/pg-memory-$round.txt" 2>&1
        mkdir -p "$dir/pglocal" && chmod 777 "$dir/pglocal"
        bash "$rig/pgbench-on-nbd.sh" --local "$dir/pglocal" >"$out/pg-local-$round.txt" 2>&1
        rm -rf "$dir/pglocal"
    done
fi

python3 - "$out" "$rounds" "${PGBENCH:-1}" "$rep1" <<'PY'
import json, os, re, statistics, sys
out, rounds, pg, rep1 = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
med = statistics.median
def fio(kind, r, name):
    job = json.load(open(f"{out}/{kind}-{r}/{name}.json"))["jobs"][0]
    d = job["write"] if job["write"]["io_bytes"] > 0 else job["read"]
    return d["iops"], d["lat_ns"]["mean"] / 1000, d["lat_ns"]["percentile"].get("99.000000", 0) / 1000
names = ["randread-4k-qd1", "randread-4k-qd32", "randwrite-4k-qd1", "randwrite-4k-qd1-fsync", "randwrite-4k-qd32"]
print(f"{'workload':<24} {'basalt IOPS':>11} {'mean us':>8} {'p99 us':>8}   {'qemu-nbd IOPS':>13} {'mean us':>8}   {'raw IOPS':>9} {'mean us':>8}   basalt/qemu-nbd   basalt/raw")
def medians(kind, name):
    """(IOPS, mean us, p99 us) of one workload, each the median over the rounds."""
    runs = [fio(kind, r, name) for r in range(1, rounds + 1)]
    return tuple(med([run[i] for run in runs]) for i in range(3))
for name in names:
    b, q, w = medians("basalt", name), medians("qemu", name), medians("raw", name)
    if name.endswith("qd1") and name.startswith("randread"):
        rq, rw = f"latency {b[1] / q[1]:.2f}x", f"latency {b[1] / w[1]:.2f}x"
    else:
        rq, rw = f"IOPS {b[0] / q[0]:.2f}x", f"IOPS {b[0] / w[0]:.2f}x"
    print(f"{name:<24} {b[0]:>11.0f} {b[1]:>8.1f} {b[2]:>8.0f}   {q[0]:>13.0f} {q[1]:>8.1f}   {w[0]:>9.0f} {w[1]:>8.1f}   {rq:>15}   {rw:>10}")
floors = [json.load(open(f"{out}/floor-{r}.json")) for r in range(1, rounds + 1)]
one, lockstep = med([x["one_writer_us"] for x in floors]), med([x["lockstep_us"] for x in floors])
qemu_flush_us = 1e6 / med([fio("qemu", r, "randwrite-4k-qd1-fsync")[0] for r in range(1, rounds + 1)])
print(f"disk floor (basalt engine sync-floor): 3 durable 4k writes at once {lockstep:.0f} us, one alone {one:.0f} us "
      f"({lockstep / one:.2f}x); qemu-nbd's write + flush takes {qemu_flush_us:.0f} us, so 3 copies on this disk "
      f"can reach at most {qemu_flush_us / lockstep:.2f}x its IOPS before any network hop")
if rep1:
    print("replication 1 (pool `one`, same OSDs and gateway): the stack without three copies on one disk")
    for name in names:
        r1, b, q = medians("rep1", name), medians("basalt", name), medians("qemu", name)
        if name.endswith("qd1") and name.startswith("randread"):
            ratio = f"latency {r1[1] / q[1]:.2f}x qemu-nbd"
        else:
            ratio = f"IOPS {r1[0] / q[0]:.2f}x qemu-nbd"
        print(f"  {name:<24} {r1[0]:>9.0f} IOPS {r1[1]:>8.1f} us mean   {ratio}   (replication 3: {b[0] / r1[0]:.2f}x the IOPS of replication 1)")
print(f"# medians of {rounds} rounds; fio's nbd engine (libnbd) for basalt and qemu-nbd, libaio O_DIRECT on a file for raw")
if pg:
    def tps(kind):
        values = []
        for r in range(1, rounds + 1):
            text = open(f"{out}/pg-{kind}-{r}.txt").read()
            found = re.search(r"RESULT .*tps=([0-9.]+)", text)
            if not found:
                raise SystemExit(f"pgbench {kind} round {r} failed; see {out}/pg-{kind}-{r}.txt")
            values.append(float(found.group(1)))
        return med(values)
    b, m, l = tps("basalt"), tps("memory"), tps("local")
    print(f"pgbench TPS: basalt {b:.0f}, nbdkit memory {m:.0f} (basalt {b / m:.2f}x), local directory {l:.0f} (basalt {b / l:.2f}x)")
    if rep1:
        one = tps("rep1")
        print(f"pgbench TPS with replication 1: {one:.0f} ({one / m:.2f}x nbdkit memory)")
PY
echo "bench-nbd: raw results in $out" >&2
