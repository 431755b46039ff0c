#!/usr/bin/env bash
# A long campaign of the whole-cluster simulation (crates/sim-cluster, ADR 0020): SEEDS seeds
# from FIRST, each run twice (their traces must hash alike; ONCE=1 runs each once, for twice the
# seeds in a sitting), with faults drawn from the seed.
# The range is split among JOBS processes (default: one per core), each stopping at its first
# failing seed and printing the command that replays it. Reports seeds per second; the logs
# are kept in LOGS (default target/sim-soak).
#
# Usage: scripts/sim-soak.sh [SEEDS] [FIRST]      (default 10000 from 1)
#        JOBS=N LOGS=DIR scripts/sim-soak.sh ...
#        BASALT_SIM_NBD=1 scripts/sim-soak.sh ...    (the clients through the NBD gateway)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-10000}
first=${2:-1}
jobs=${JOBS:-$(nproc)}
logs=${LOGS:-target/sim-soak}
mkdir -p "$logs"
# The test profile: optimised, with debug assertions and overflow checks on.
cargo test -p sim-cluster --test seeds --no-run >&2
binary=$(cargo test -p sim-cluster --test seeds --no-run --message-format=json 2>/dev/null |
    jq -r 'select(.executable != null and .target.name == "seeds") | .executable' | tail -1)
runs=twice
if [[ -n ${ONCE:-} ]]; then
    export BASALT_SIM_ONCE=1
    runs=once
fi
started=$(date +%s.%N)
chunk=$(((seeds + jobs - 1) / jobs))
pids=()
for ((job = 0; job < jobs; job++)); do
    from=$((first + job * chunk))
    count=$((seeds - job * chunk < chunk ? seeds - job * chunk : chunk))
    ((count > 0)) || break
    BASALT_SIM_SEEDS=$count BASALT_SIM_FIRST=$from \
        "$binary" --exact seeds_pass_and_replay_alike --nocapture >"$logs/job$job.log" 2>&1 &
    pids+=("$!")
done
failed=0
for ((job = 0; job < ${#pids[@]}; job++)); do
    if ! wait "${pids[$job]}"; then
        failed=1
        echo "sim-soak: job $job failed ($logs/job$job.log):" >&2
        grep -A3 -E "failed|ran differently" "$logs/job$job.log" | grep -v "^ *[0-9.]* ms" | head -20 >&2 || true
        grep "^replay:" "$logs/job$job.log" >&2 || true
    fi
done
seconds=$(echo "$(date +%s.%N) - $started" | bc)
if ((failed)); then
    echo "sim-soak: FAILED after $(printf '%.0f' "$seconds") s" >&2
    exit 1
fi
printf 'sim-soak: seeds %d to %d passed in %.0f s: %.1f seeds/s (each run %s, %d jobs)\n' \
    "$first" "$((first + seeds - 1))" "$seconds" "$(echo "$seeds / $seconds" | bc -l)" "$runs" "${#pids[@]}"
