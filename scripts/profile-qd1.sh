#!/usr/bin/env bash
# Where a QD1 read's or write's time goes, phase by phase, on this machine
# (docs/benchmarks/cluster.md, "Where a QD1 read's time goes", "Where a QD1 write's time goes").
#
# RW=write: `basalt dev` is started again on the written volume (its counters start at zero),
# `basalt bench` runs QD1 4 KiB random writes for RUNTIME seconds, and the OSDs' stop lines give
# the mean time of each op and phase as an OSD saw it (`op_times`: a client's write on its
# primary, the primary's own commit, its round trip to the members, a member's write); then
# `basalt engine sync-floor` measures the disk's floor for three copies, alone and behind the
# two round trips of a replicated write. The rest of this comment is about reads (the default).
#
# Starts a fresh `basalt dev` in DIR with a 1 GiB volume written whole, runs `basalt bench` QD1
# 4 KiB random reads, and records system-wide perf tracepoints for TRACE_S seconds in the middle
# of them: syscall entries and exits (epoll_wait's left out: a polling client makes millions),
# block-layer issues and completions, io_uring completions, scheduler switches and wake-ups.
# `scripts/lib/qd1-timeline.py` then follows each read from the client's request to its reply
# and prints each phase's median. Tracing adds about a microsecond per event, so the phases'
# sum exceeds an untraced read's latency, which the bench run prints beside it; last,
# `basalt engine read-floor` measures the disk alone and behind one local round trip.
#
# Usage: scripts/profile-qd1.sh [DIR]        (default /var/tmp; as root; needs perf and jq)
# Env:   RW=read|write  CLIENT_SPIN_US=0 (the bench's --client-spin-us)  TRACE_S=0.5  RUNTIME=10 (writes)
#        OUT=DIR (keeps the trace)  BASALT_BIN=PATH (a build to run)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-profile-qd1
out=${OUT:-$(mktemp -d)}
trace_s=${TRACE_S:-0.5}
mkdir -p "$out"
source scripts/lib/basalt-bin.sh
api=127.0.0.1:18280
command -v perf >/dev/null || { echo "profile-qd1: perf is not installed" >&2; exit 1; }

source scripts/lib/scratch.sh

"$basalt" dev --data "$dir" --api "$api" --meta-listen 127.0.0.1:12590 --nbd 127.0.0.1:18919 --volume bench=1G \
    >"$out/dev.log" 2>&1 &
pids+=($!)
wait_ready() {
    for _ in $(seq 1 150); do grep -q ready "$1" && return 0; sleep 0.2; done
    echo "profile-qd1: basalt dev did not start; see $1" >&2
    exit 1
}
wait_ready "$out/dev.log"
"$basalt" -q bench --api "$api" --volume bench --rw randread --bs 4k --iodepth 1 --runtime 1 --ramp 0 --prefill \
    --json >/dev/null

if [[ ${RW:-read} == write ]]; then
    kill -INT "${pids[0]}"
    wait "${pids[0]}" || true
    pids=()
    "$basalt" dev --data "$dir" --api "$api" --meta-listen 127.0.0.1:12590 --nbd 127.0.0.1:18919 --volume bench=1G \
        >"$out/dev-writes.log" 2>&1 &
    pids+=($!)
    wait_ready "$out/dev-writes.log"
    "$basalt" -q bench --api "$api" --volume bench --rw randwrite --bs 4k --iodepth 1 --runtime "${RUNTIME:-10}" \
        --client-spin-us "${CLIENT_SPIN_US:-0}" --json >"$out/bench.json"
    kill -INT "${pids[0]}"
    wait "${pids[0]}" || true
    pids=()
    jq -r '"client: \(.iops | floor) writes/s, mean \(.lat_mean_us) us, p99 \(.lat_p99_us) us"' "$out/bench.json"
    grep -o 'osd=[0-9]* .*op_times=.*' "$out/dev-writes.log" | sed 's/ journal_written_bytes.*op_times=/ /'
    "$basalt" -q engine sync-floor --dir "$base" --writers 3 --runtime 9
    echo "profile-qd1: logs in $out" >&2
    exit 0
fi

runtime=$(python3 -c "import math; print(math.ceil($trace_s) + 5)")
"$basalt" -q bench --api "$api" --volume bench --rw randread --bs 4k --iodepth 1 --runtime "$runtime" --ramp 0 \
    --client-spin-us "${CLIENT_SPIN_US:-0}" --json >"$out/bench.json" &
client=$!
sleep 2
not_epoll='id != 232'
perf record -a -o "$out/trace.data" -e sched:sched_switch -e sched:sched_wakeup \
    -e raw_syscalls:sys_enter --filter "$not_epoll" -e raw_syscalls:sys_exit --filter "$not_epoll" \
    -e block:block_rq_issue -e block:block_rq_complete -e io_uring:io_uring_complete \
    -- sleep "$trace_s" 2>"$out/perf-record.log" >/dev/null
wait "$client"
perf script -i "$out/trace.data" --ns -F comm,pid,tid,cpu,time,event,trace 2>/dev/null |
    python3 scripts/lib/qd1-timeline.py "$client"
jq -r '"untraced, the whole run: \(.iops | floor) reads/s, mean \(.lat_mean_us) us, p99 \(.lat_p99_us) us"' "$out/bench.json"
"$basalt" -q engine read-floor --dir "$base" --runtime 10
echo "profile-qd1: trace and logs in $out" >&2
