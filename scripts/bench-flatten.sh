#!/usr/bin/env bash
# Flatten (ADR 0035) against the disk and against clients, on `basalt dev` (three OSDs on files,
# 3 copies): a volume written whole, a snapshot of it and three clones.
#   idle     `basalt volume flatten` of the first clone with no client: its time and rate
#            (every object of the clone is copied up, the volume's size in bytes per copy);
#   quiet    fio QD1 4 KiB random reads, then writes, on the volume (p50/p99);
#   loaded   the same while the second, then the third clone is flattened: p99 against quiet,
#            and the flatten's rate meanwhile.
# The backfill rate to compare the idle rate with: `IDLE_ONLY=1 scripts/bench-backfill.sh` in the
# same sitting. Prints one line per measurement.
#
# Usage: scripts/bench-flatten.sh [DIR]   (default /var/tmp; needs fio with its nbd engine, jq)
# Env:   VOLUME=2G  RUNTIME=10 (s of each fio run)  BASALT_BIN=PATH (a build to run)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-flatten-bench
volume=${VOLUME:-2G}
runtime=${RUNTIME:-10}
source scripts/lib/basalt-bin.sh
api=127.0.0.1:8080
nbd=nbd://127.0.0.1:10809

source scripts/lib/dev-cluster.sh
start_dev --osd-size 12G --volume "gold=$volume"

fio --name=fill --ioengine=nbd --uri="$nbd/gold" --rw=write --bs=1M --iodepth=8 --size="$volume" \
    --output-format=terse >/dev/null
"$basalt" snapshot create gold@s --api "$api" >/dev/null
for clone in c1 c2 c3; do "$basalt" volume clone gold@s "$clone" --api "$api" >/dev/null; done
bytes=$("$basalt" volume info gold --json --api "$api" | jq '.size_bytes')

# Flattens CLONE, waiting; prints its seconds.
flatten() {
    local start end
    start=$(date +%s.%N)
    "$basalt" -q volume flatten "$1" --api "$api" >/dev/null
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

# fio QD1 4 KiB random RW on the volume for RUNTIME s; prints "p50_us p99_us iops".
qd1() {
    local out=$dir/fio.$1.$RANDOM.json
    fio --name=q --ioengine=nbd --uri="$nbd/gold" --rw="$1" --bs=4k --iodepth=1 --size="$volume" \
        --time_based --runtime="$runtime" --output-format=json --output="$out" >/dev/null
    jq -r --arg rw "${1#rand}" '
        .jobs[0][$rw] as $j | "\($j.clat_ns.percentile["50.000000"] / 1000 | floor) \($j.clat_ns.percentile["99.000000"] / 1000 | floor) \($j.iops | floor)"' "$out"
}

echo "bench-flatten $(date -u +%F\ %H:%M) $(git rev-parse --short HEAD): $basalt, volume $volume"
seconds=$(flatten c1)
printf 'idle flatten of a %s clone: %.2f s, %d MiB/s\n' "$volume" "$seconds" "$(echo "$bytes / 1048576 / $seconds" | bc)"
for rw in randread randwrite; do
    read -r p50 p99 iops < <(qd1 "$rw")
    clone=$([[ $rw == randread ]] && echo c2 || echo c3)
    qd1 "$rw" >"$dir/loaded.$rw" &
    load=$!
    sleep 1
    seconds=$(flatten "$clone")
    wait "$load"
    read -r lp50 lp99 liops <"$dir/loaded.$rw"
    printf 'QD1 %s: quiet p50 %d us p99 %d us (%d IOPS); during a flatten (%.2f s, %d MiB/s) p50 %d us p99 %d us (%d IOPS): p99 %.2fx\n' \
        "$rw" "$p50" "$p99" "$iops" "$seconds" "$(echo "$bytes / 1048576 / $seconds" | bc)" "$lp50" "$lp99" "$liops" \
        "$(echo "$lp99 / $p99" | bc -l)"
done
