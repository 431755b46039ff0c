#!/usr/bin/env bash
# What it costs to ask about a large volume's snapshots: `basalt dev` with a 100 GiB volume
# (thin: 1 GiB written whole, then 2,000 random 4 KiB pages before each of two snapshots), then,
# ROUNDS times each, the time of `basalt volume du` (the OSDs count every layer's objects from
# RAM, ADR 0032), of `basalt snapshot diff` and of `nbdinfo --map=qemu:dirty-bitmap:` between
# the two snapshots (one Changes round trip per object, ADR 0034), of `nbdinfo --map` of the
# volume's base:allocation (one Stat per object: the same walk, for scale), and of `basalt
# snapshot rm` of a snapshot holding 1 GiB and of one holding 8 MiB (their removal is a record's
# change, whatever they hold). Prints each median and the objects walked per second.
#
# Usage: scripts/bench-backup.sh [DIR]   (default /var/tmp; needs fio with its nbd engine, nbdinfo, jq)
# Env:   ROUNDS=3  BASALT_BIN=PATH (a build to run)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/var/tmp}
dir=$base/basalt-backup-bench
rounds=${ROUNDS:-3}
source scripts/lib/basalt-bin.sh
api=127.0.0.1:8080
nbd=nbd://127.0.0.1:10809

source scripts/lib/dev-cluster.sh
start_dev --osd-size 20G --volume big=100G

pages() { # seed: 2,000 random 4 KiB writes over the whole volume
    fio --name=p --ioengine=nbd --uri="$nbd/big" --rw=randwrite --bs=4k --iodepth=16 --number_ios=2000 \
        --randseed="$1" --size=100G --output-format=terse >/dev/null
}
fio --name=fill --ioengine=nbd --uri="$nbd/big" --rw=write --bs=1M --iodepth=8 --size=1G --output-format=terse >/dev/null
"$basalt" snapshot create big@base --api "$api" >/dev/null
pages 1
"$basalt" snapshot create big@mon --api "$api" >/dev/null
pages 2
"$basalt" snapshot create big@tue --api "$api" >/dev/null
objects=$((100 * 1024 * 8)) # 128 KiB objects

# Prints the median of ROUNDS timings (seconds) of a command, after a first run that must succeed.
median_of() {
    "$@" >/dev/null || { echo "bench-backup: $* failed" >&2; kill $$; }
    local times=()
    for _ in $(seq 1 "$rounds"); do
        local start end
        start=$(date +%s.%N)
        "$@" >/dev/null
        end=$(date +%s.%N)
        times+=("$(echo "$end - $start" | bc)")
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'
}

report() { # label, seconds, objects walked (0: none)
    if [[ $3 -gt 0 ]]; then
        printf '%-58s %8.3f s  (%d objects/s)\n' "$1" "$2" "$(echo "$3 / $2" | bc)"
    else
        printf '%-58s %8.3f s\n' "$1" "$2"
    fi
}

changed=$("$basalt" snapshot diff big@mon big@tue --json --api "$api" | jq '.changed_bytes')
echo "bench-backup: $basalt, 100 GiB volume, $objects objects; big@tue differs from big@mon in $((changed / 4096)) pages; medians of $rounds"
report "volume du big" "$(median_of "$basalt" volume du big --api "$api")" 0
report "snapshot diff big@mon big@tue" "$(median_of "$basalt" snapshot diff big@mon big@tue --json --api "$api")" $objects
report "nbdinfo --map=qemu:dirty-bitmap:mon big@tue" \
    "$(median_of nbdinfo --map=qemu:dirty-bitmap:mon "$nbd/big@tue")" $objects
report "nbdinfo --map (base:allocation) big@tue" "$(median_of nbdinfo --map "$nbd/big@tue")" $objects
start=$(date +%s.%N)
"$basalt" snapshot rm big@base --api "$api" >/dev/null
report "snapshot rm big@base (holds 1 GiB)" "$(echo "$(date +%s.%N) - $start" | bc)" 0
start=$(date +%s.%N)
"$basalt" snapshot rm big@mon --api "$api" >/dev/null
report "snapshot rm big@mon (holds 8 MiB)" "$(echo "$(date +%s.%N) - $start" | bc)" 0
