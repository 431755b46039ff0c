#!/usr/bin/env bash
# Does a write-only load make the drive read? `basalt dev` with its defaults (sparse OSD files of
# 10 GiB) and with OSD files of 2 GiB (bench-cluster.sh's), each fresh, and fio writing 4 KiB at
# random over the first GiB of the volume (what 2 GiB OSDs hold) through NBD, at queue depth 32
# and then 1. Prints, per
# setup and depth: IOPS, mean latency, the bytes fio wrote, the drive's read and written bytes
# (/proc/diskstats of the disk under DIR) and the dev process's own (/proc/PID/io), and what the
# OSDs report at their stop (journal bytes read back by write-back, metadata pages loaded).
#
# Usage: scripts/bench-write-only.sh [DIR]   (default /var/tmp; needs fio with its nbd engine, jq)
# Env:   RUNTIME=20 (s, at depth 32; depth 1 runs 3/4 of it)  BASALT_BIN=PATH (a build to run)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-write-only-bench
runtime=${RUNTIME:-20}
source scripts/lib/basalt-bin.sh
disk=$(lsblk -no pkname "$(df --output=source "$base" | tail -1)" 2>/dev/null || true)
disk=${disk:-$(basename "$(df --output=source "$base" | tail -1)")}

pid=
stop() {
    [[ -n $pid ]] && kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    pid=
}
trap 'stop; rm -rf "$dir"' EXIT

sectors() { awk -v disk="$disk" '$3 == disk { print $6, $10 }' /proc/diskstats; }
process_io() { awk '/^read_bytes/ { r = $2 } /^write_bytes/ { w = $2 } END { print r, w }' "/proc/$pid/io"; }

# One setup (OSD file size) at one queue depth, on a fresh `basalt dev`.
run() {
    local size=$1 depth=$2 seconds=$3
    rm -rf "$dir"
    mkdir -p "$dir"
    "$basalt" dev --data "$dir" --osd-size "$size" >"$dir/dev.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do grep -q "ready" "$dir/dev.log" && break; sleep 0.2; done
    grep -q "ready" "$dir/dev.log" || { echo "bench-write-only: basalt dev did not start" >&2; cat "$dir/dev.log" >&2; exit 1; }
    read -r drive_read0 drive_written0 < <(sectors)
    read -r process_read0 process_written0 < <(process_io)
    fio --name=w --ioengine=nbd --uri=nbd://127.0.0.1:10809/vol0 --rw=randwrite --bs=4k --iodepth="$depth" \
        --time_based --runtime="$seconds" --size=1G --output-format=json --output="$dir/fio.json" >/dev/null
    read -r drive_read1 drive_written1 < <(sectors)
    read -r process_read1 process_written1 < <(process_io)
    stop
    local read_back loaded
    # Builds before these counters were logged report none (0).
    read_back=$(awk -F'writeback_journal_read_bytes=' 'NF > 1 { split($2, v, " "); s += v[1] } END { print s + 0 }' "$dir/dev.log")
    loaded=$(awk -F'meta_pages_loaded=' 'NF > 1 { split($2, v, " "); s += v[1] } END { print s + 0 }' "$dir/dev.log")
    jq -r --arg size "$size" --arg depth "$depth" \
        --argjson dr $(((drive_read1 - drive_read0) * 512)) --argjson dw $(((drive_written1 - drive_written0) * 512)) \
        --argjson pr $((process_read1 - process_read0)) --argjson pw $((process_written1 - process_written0)) \
        --argjson rb "$read_back" --argjson ml "$loaded" '
        .jobs[0].write as $w | ($w.io_bytes) as $io |
        "osd files \($size), QD\($depth): \($w.iops | floor) IOPS, \($w.clat_ns.mean / 1000 | floor) us mean; fio wrote \($io / 1048576 | floor) MiB; " +
        "drive read \($dr / 1048576 | floor) MiB (\($dr * 1000 / $io | floor / 10)% of what fio wrote), wrote \($dw / 1048576 | floor) MiB; " +
        "the process read \($pr / 1048576 | floor) MiB, wrote \($pw / 1048576 | floor) MiB; journal read back \($rb / 1048576 | floor) MiB, metadata pages loaded \($ml)"' \
        "$dir/fio.json"
}

echo "bench-write-only: $basalt on $disk, ${runtime} s at QD32, $((runtime * 3 / 4)) s at QD1"
for size in 10G 2G; do
    run "$size" 32 "$runtime"
    run "$size" 1 $((runtime * 3 / 4))
done
