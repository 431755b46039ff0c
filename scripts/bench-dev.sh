#!/usr/bin/env bash
# `basalt dev` against the same cluster run as separate processes, in one sitting: is a
# single-process cluster slower, and if so is it Basalt's doing or the disk's?
#
# Four setups alternate ROUNDS times, each built afresh in DIR: `basalt dev` and a mon with
# three `basalt osd` processes, each with OSD files of 10 GiB (`basalt dev`'s default) and of
# 2 GiB (bench-cluster.sh's). Each gets a 1 GiB volume in a pool of 3 replicas (failure domain
# osd, default PG count), written whole with `basalt bench --prefill`, then `basalt bench`
# QD1 4 KiB random reads twice: with the client's default polling and with polling off
# (`--client-spin-us 0`). Prints medians of IOPS, mean latency, and CPU seconds per 10,000
# reads of the bench client and of the servers (the dev process, or the mon and OSDs).
#
# Usage: scripts/bench-dev.sh [DIR]        (default /var/tmp; needs jq)
# Env:   ROUNDS=3  RUNTIME=10  OUT=DIR (keeps the raw results)  BASALT_BIN=PATH (a build to run)
#        SETUPS="dev:10G processes:2G" (a subset of the four, as SETUP:SIZE)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-dev-bench
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-10}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
source scripts/lib/basalt-bin.sh
api=127.0.0.1:18180
meta=127.0.0.1:12490

server_pids=()
stop_servers() {
    for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    server_pids=()
    rm -rf "$dir"
}
trap stop_servers EXIT

wait_for_osds() {
    local up=0
    for _ in $(seq 1 150); do
        up=$("$basalt" osd ls --api "$api" --json 2>/dev/null | jq '[.osds[] | select(.up)] | length' 2>/dev/null || echo 0)
        [[ "$up" == 3 ]] && return 0
        sleep 0.2
    done
    echo "bench-dev: OSDs did not come up; logs in $out" >&2
    exit 1
}

# Starts SETUP (dev or processes) with OSD files of SIZE; leaves a 1 GiB volume `bench`.
start() {
    local setup=$1 size=$2 log=$3
    rm -rf "$dir"
    mkdir -p "$dir"
    if [[ $setup == dev ]]; then
        "$basalt" dev --data "$dir" --osd-size "$size" --api "$api" --meta-listen "$meta" --nbd 127.0.0.1:18909 \
            --volume bench=1G >"$log" 2>&1 &
        server_pids+=($!)
        wait_for_osds
    else
        "$basalt" mon --embedded "$dir/meta" --meta-listen "$meta" --api "$api" >"$log.mon" 2>&1 &
        server_pids+=($!)
        for i in 0 1 2; do
            "$basalt" -q osd init --data "$dir/osd$i.img" --size "$size" >&2
            "$basalt" osd --etcd "basalt://$meta" --data "$dir/osd$i.img" --listen "127.0.0.1:$((16900 + i))" \
                --host dev --local-socket "$dir/osd$i.sock" >"$log.osd$i" 2>&1 &
            server_pids+=($!)
        done
        wait_for_osds
        "$basalt" -q pool create default --replicas 3 --min-size 2 --failure-domain osd --api "$api" >/dev/null
        "$basalt" -q volume create bench --size 1G --pool default --api "$api" >/dev/null
    fi
    for _ in $(seq 1 100); do
        "$basalt" volume info bench --api "$api" >/dev/null 2>&1 && break
        sleep 0.1
    done
}

# utime + stime of the server processes, in clock ticks.
server_ticks() {
    local total=0 pid
    for pid in "${server_pids[@]}"; do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}

# Runs `basalt bench ARGS` as a child and prints its JSON with the client's CPU seconds added.
bench() {
    python3 - "$basalt" "$@" <<'PY'
import json, resource, subprocess, sys
run = subprocess.run([sys.argv[1], "-q", "bench", *sys.argv[2:], "--json"], capture_output=True, text=True)
if run.returncode != 0:
    sys.exit(f"bench-dev: basalt bench failed: {run.stderr.strip()}")
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
row = json.loads(run.stdout)
row["client_cpu_s"] = usage.ru_utime + usage.ru_stime
print(json.dumps(row))
PY
}

setups=${SETUPS:-"dev:10G processes:10G dev:2G processes:2G"}
for round in $(seq 1 "$rounds"); do
    for spec in $setups; do
        setup=${spec%%:*} size=${spec##*:}
        echo "bench-dev: round $round of $rounds, $setup with $size OSD files" >&2
        start "$setup" "$size" "$out/$setup-$size-$round.log"
        bench --api "$api" --volume bench --rw randread --bs 4k --iodepth 1 --runtime 1 --ramp 0 --prefill >/dev/null
        for spin in default 0; do
            spin_args=()
            [[ $spin == 0 ]] && spin_args=(--client-spin-us 0)
            before=$(server_ticks)
            bench --api "$api" --volume bench --rw randread --bs 4k --iodepth 1 --runtime "$runtime" "${spin_args[@]}" \
                >"$out/$setup-$size-$round-spin-$spin.json"
            echo "$(($(server_ticks) - before))" >"$out/$setup-$size-$round-spin-$spin.ticks"
        done
        stop_servers
    done
done

python3 - "$out" "$rounds" "$runtime" "$(getconf CLK_TCK)" "$setups" <<'PY'
import json, statistics, sys
out, rounds, runtime, hz, setups = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split()
med = statistics.median
print(f"{'setup':<16} {'client polling':<15} {'IOPS':>7} {'mean us':>8} {'client cpu s/10k':>17} {'server cpu s/10k':>17}   IOPS per round")
for spec in setups:
    setup, size = spec.split(":")
    for spin in ("default", "0"):
        rows = []
        for r in range(1, rounds + 1):
            row = json.load(open(f"{out}/{setup}-{size}-{r}-spin-{spin}.json"))
            ticks = int(open(f"{out}/{setup}-{size}-{r}-spin-{spin}.ticks").read())
            ios_10k = row["iops"] * runtime / 10000
            rows.append((row["iops"], row["lat_mean_us"], row["client_cpu_s"] / ios_10k, ticks / hz / ios_10k))
        cols = [med([x[i] for x in rows]) for i in range(4)]
        polling = "on (default)" if spin == "default" else "off"
        per_round = ", ".join(f"{x[0]:.0f}" for x in rows)
        print(f"{setup + ' ' + size:<16} {polling:<15} {cols[0]:>7.0f} {cols[1]:>8.1f} {cols[2]:>17.2f} {cols[3]:>17.2f}   {per_round}")
print(f"# medians of {rounds} rounds, {runtime:.0f} s each; QD1 4 KiB random reads over a whole-written 1 GiB volume, replication 3")
PY
echo "bench-dev: raw results in $out" >&2
