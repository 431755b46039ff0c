#!/usr/bin/env bash
# Backfill and scrub against the disk and against clients, in one sitting on a fresh cluster
# (mon on its embedded store, three OSDs on files, 3 copies, min_size 2, a volume written whole)
# in a network namespace of its own:
#   floor     fio's sequential 1 MiB direct write rate on the same filesystem, and its write rate
#             in a copy's pattern (128 KiB random reads and O_DSYNC writes, half and half);
#   idle      a fourth OSD joins with no client load: time until every PG is clean on its new
#             set, bytes the new OSD received, their rate against the floor, and how honest
#             `basalt status`'s time left was at the halfway point (sampled every 0.1 s);
#   quiet     fio QD1 4 KiB random reads, then writes, through `basalt nbd` (p50/p99, IOPS);
#   baseline  the same beside the status sampling the loaded runs do;
#   loaded    the same reads while a fifth OSD joins, the same writes while it is marked out
#             again: p99 against the baseline, and the backfill's rate meanwhile;
#   scrub     `basalt scrub --wait` idle (bytes read per second over every copy), then under
#             the QD1 reads: p99 against the baseline.
# Prints one line per measurement.
#
# Usage: scripts/bench-backfill.sh [DIR]      (as root: it creates a network namespace)
# Env:   BASALT_BIN   the basalt binary (default: built with cargo --release)
#        VOLUME=1G    the volume;  OSD_SIZE=3G  each OSD's file
#        MIN_RATE     bytes per second: `basalt config set recovery_bytes_per_s_min` first (default: the cluster's)
#        LOADED_SCRUB=1   0 skips the scrub under load (the longest phase)
#        IDLE_ONLY=1  stops after the idle join (with a larger VOLUME, a copy long enough for
#                     its time left to be judged)
#        KEEP=DIR     keeps the samples (status's backlog and time left, objects left per
#                     primary), the logs and fio's results there
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/basalt-bin.sh
. scripts/lib/basalt-bin.sh
dir=${1:-/var/tmp}/bench-backfill
rm -rf "$dir"; mkdir -p "$dir"
echo "bench-backfill $(date -u +%F) $(git rev-parse --short HEAD) volume ${VOLUME:-1G}"
unshare -n bash -s "$basalt" "$dir" "${VOLUME:-1G}" "${OSD_SIZE:-3G}" "${MIN_RATE:-}" "${LOADED_SCRUB:-1}" "${IDLE_ONLY:-0}" <<'EOF'
set -euo pipefail
B=$1 D=$2 VOLUME=$3 OSD_SIZE=$4 MIN_RATE=$5 LOADED_SCRUB=$6 IDLE_ONLY=$7 API=127.0.0.1:8080 NBD=nbd://127.0.0.1:10809/v
ip link set lo up
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null' EXIT
now() { date +%s.%N; }
"$B" mon --api $API --id mon-a --meta-listen 127.0.0.1:2390 --embedded "$D/meta" >"$D/mon.log" 2>&1 & pids+=($!)
until "$B" status --api $API >/dev/null 2>&1; do sleep 0.2; done
init_osd() { "$B" -q osd init --data "$D/osd$1.img" --size "$OSD_SIZE" >/dev/null; }
run_osd() { # INDEX
    "$B" osd --etcd basalt://127.0.0.1:2390 --data "$D/osd$1.img" --listen 127.0.0.$(($1 + 2)):6800 --host h$1 \
        >"$D/osd$1.log" 2>&1 &
    pids+=($!)
}
up_count() { "$B" osd ls --json --api $API | jq '[.osds[] | select(.up)] | length'; }
osd_id() { "$B" osd ls --json --api $API | jq ".osds[] | select(.address == \"127.0.0.$(($1 + 2)):6800\") | .id"; }
settled_in() { # PG_LS_JSON
    jq -e '[.pgs[] | select(.state != "clean" or (.acting | sort) != (.target | sort))] | length == 0' <<<"$1" >/dev/null; }
settled() { settled_in "$("$B" pg ls --json --api $API)"; }
# Bytes the primaries copied in the background so far (their `pg recovered` log lines).
copied_bytes() { cat "$D"/osd*.log | sed -n 's/.*pg recovered.* bytes=\([0-9]*\).*/\1/p' | awk '{ b += $1 } END { printf "%.0f\n", b }'; }
# Samples status's backlog and time left every INTERVAL seconds (twice a second by default)
# until every PG is on its new set.
# Beside FILE, FILE.primaries has each sample's objects left per primary ("OSD:OBJECTS").
sample_until_settled() { # FILE [INTERVAL]
    : >"$1"; : >"$1.primaries"
    local pgs t
    while true; do
        pgs=$("$B" pg ls --json --api $API) || { sleep 0.1; continue; }
        settled_in "$pgs" && break
        t=$(now)
        "$B" status --json --api $API |
            jq -r --arg t "$t" '[$t, .recovery.bytes_left, (.recovery.seconds_left // -1)] | @tsv' >>"$1"
        jq -r --arg t "$t" '[$t] + ([.pgs[] | select(.objects_left > 0)] | group_by(.primary)
            | map("\(.[0].primary):\(map(.objects_left) | add)")) | @tsv' <<<"$pgs" >>"$1.primaries"
        sleep "${2:-0.5}"
    done
}
# The time left status showed at the halfway point (the first sample at or under half the
# largest backlog) against the time the copy really took from there, and until every PG was
# on its new set.
eta_report() { # LABEL COPY_END SETTLED [FILE]
    awk -v label="$1" -v copied="$2" -v end="$3" -F'\t' '
        { t[NR] = $1; left[NR] = $2; eta[NR] = $3; if ($2 > peak) peak = $2 }
        END {
            for (i = 1; i <= NR; i++) if (left[i] <= peak / 2 && left[i] > 0 && eta[i] >= 0) {
                real = copied - t[i]
                printf "%-9s time left at the halfway point: said %.1f s; the copy took %.1f s more (%+.0f%%), every PG settled %.1f s more\n", label, eta[i], real, (eta[i] - real) / real * 100, end - t[i]
                exit
            }
            printf "%-9s time left at the halfway point: no estimate was shown\n", label
        }' "${4:-$D/eta.txt}"
}
# When the backlog in a sample FILE first reached zero after it began.
copy_end() { # FILE SETTLED
    awk -v end="$2" -F'\t' '$2 > 0 && !s { s = $1 } s && $2 == 0 && !e { e = $1 } END { print (e ? e : end) }' "$1"
}
# Waits (10 s at most) until some PG is moving.
until_moving() {
    for _ in $(seq 100); do
        "$B" status --json --api $API | jq -e '.pgs.misplaced > 0' >/dev/null && return
        sleep 0.1
    done
}
for i in 0 1 2; do init_osd $i; run_osd $i; done
until [[ $(up_count) == 3 ]]; do sleep 0.2; done
if [[ -n $MIN_RATE ]]; then "$B" -q config set recovery_bytes_per_s_min "$MIN_RATE" --api $API >/dev/null; fi
"$B" config get --api $API | grep recovery_bytes_per_s_min
"$B" pool create p --replicas 3 --min-size 2 --pgs 64 --api $API >/dev/null
"$B" volume create v --size "$VOLUME" --pool p --api $API >/dev/null
"$B" nbd --api $API >"$D/nbd.log" 2>&1 & pids+=($!)
until settled; do sleep 0.2; done
fio --name=fill --ioengine=nbd --uri=$NBD --rw=write --bs=1M --iodepth=8 --size="$VOLUME" --output="$D/fill.txt"

# The disk's floor: sequential direct writes on the same filesystem.
fio --name=floor --filename="$D/floor.img" --rw=write --bs=1M --size=1G --direct=1 --ioengine=libaio --iodepth=8 \
    --end_fsync=1 --output-format=json --output="$D/floor.json"
rm -f "$D/floor.img"
floor=$(jq '.jobs[0].write.bw_bytes / 1048576' "$D/floor.json")
printf 'floor     sequential 1 MiB direct writes: %.0f MiB/s\n' "$floor"
# The disk's floor for a copy: every byte copied is read once from the disk and written once
# onto it, durably; fio's even mix of 128 KiB random reads and O_DSYNC writes, 16 in flight, is
# that pattern with nothing else (the engine adds its journal to each write; fio does not).
fio --name=copy-floor --filename="$D/floor.img" --rw=randrw --rwmixread=50 --bs=128k --size=1G --direct=1 \
    --ioengine=io_uring --iodepth=16 --sync=dsync --runtime=10 --time_based --output-format=json \
    --output="$D/copy-floor.json"
rm -f "$D/floor.img"
copy_floor=$(jq '.jobs[0].write.bw_bytes / 1048576' "$D/copy-floor.json")
printf 'floor     a copy: 128 KiB random reads and O_DSYNC writes half and half, 16 in flight: %.0f MiB/s written\n' "$copy_floor"

# A join with idle clients, from the OSD's start; status's backlog and time left are sampled
# every 0.1 s.
init_osd 3
before=$(copied_bytes)
started=$(now)
run_osd 3
until_moving
# A copy of seconds: sampled five times as often, for its start and end.
sample_until_settled "$D/eta.txt" 0.1
finished=$(now)
moved=$(( $(copied_bytes) - before ))
# The copy itself: from the first sample with a backlog to the first without one after it (or
# to the end, when every PG settled before a sample saw the backlog empty).
read -r copy_start copy_end < <(awk -v end="$finished" -F'\t' '$2 > 0 && !s { s = $1 } s && $2 == 0 && !e { e = $1 }
    END { print s, (e ? e : end) }' "$D/eta.txt")
copy_seconds=$(echo "$copy_end - $copy_start" | bc)
rate=$(echo "$moved / 1048576 / $copy_seconds" | bc -l)
printf 'idle      join: %.0f MiB to the new osd, copied in %.1f s: %.0f MiB/s = %.2fx the sequential floor, %.2fx the copy floor; every PG on its new set %.1f s after the osd started\n' \
    "$(echo "$moved / 1048576" | bc -l)" "$copy_seconds" "$rate" "$(echo "$rate / $floor" | bc -l)" "$(echo "$rate / $copy_floor" | bc -l)" \
    "$(echo "$finished - $started" | bc)"
eta_report idle "$copy_end" "$finished"
if [[ $IDLE_ONLY == 1 ]]; then exit 0; fi

qd1() { # NAME RW SECONDS -> fio json in $D/NAME.json
    fio --name="$1" --ioengine=nbd --uri=$NBD --rw="$2" --bs=4k --iodepth=1 --size="$VOLUME" --time_based \
        --runtime="$3" --output-format=json --output="$D/$1.json"
}
latency() { # NAME KIND -> "p50 p99 iops"; fio stopped by a signal says so before its JSON
    sed -n '/^{/,$p' "$D/$1.json" | jq -r ".jobs[0].$2 | [(.clat_ns.percentile[\"50.000000\"] / 1000), (.clat_ns.percentile[\"99.000000\"] / 1000), .iops] | @tsv"
}
report() { # LABEL NAME KIND [BASE_NAME]
    read -r p50 p99 iops < <(latency "$2" "$3")
    if [[ -n ${4:-} ]]; then
        read -r _ base99 _ < <(latency "$4" "$3")
        printf '%-9s QD1 4 KiB %s: p50 %.0f us, p99 %.0f us = %.2fx the baseline p99, %.0f IOPS\n' \
            "$1" "$3" "$p50" "$p99" "$(echo "$p99 / $base99" | bc -l)" "$iops"
    else
        printf '%-9s QD1 4 KiB %s: p50 %.0f us, p99 %.0f us, %.0f IOPS\n' "$1" "$3" "$p50" "$p99" "$iops"
    fi
}
# The loaded runs sample `basalt status` and `basalt pg ls` twice a second (the time left, and
# whether every PG settled); on two cores those processes alone raise client p99 (1.5-2x
# measured), so the baselines run beside the same sampling and the ratios are against them.
sampling() { # SECONDS
    local end; end=$(echo "$(now) + $1" | bc)
    while (($(echo "$(now) < $end" | bc))); do
        settled || true
        "$B" status --json --api $API | jq -r '[.recovery.bytes_left, (.recovery.seconds_left // -1)] | @tsv' >/dev/null
        sleep 0.5
    done
}
qd1 quiet-read randread 20; report quiet quiet-read read
qd1 quiet-write randwrite 20; report quiet quiet-write write
sampling 21 & sampler=$!; qd1 base-read randread 20; wait $sampler; report baseline base-read read
sampling 21 & sampler=$!; qd1 base-write randwrite 20; wait $sampler; report baseline base-write write

# Reads while a fifth OSD joins; writes while it leaves again. fio stops when the backfill is done.
loaded() { # NAME RW LABEL ACTION...
    local name=$1 rw=$2 label=$3; shift 3
    fio --name="$name" --ioengine=nbd --uri=$NBD --rw="$rw" --bs=4k --iodepth=1 --size="$VOLUME" --time_based \
        --runtime=600 --output-format=json --output="$D/$name.json" &
    local job=$!
    sleep 2
    local begin copied0; begin=$(now); copied0=$(copied_bytes)
    "$@"
    until_moving
    sample_until_settled "$D/$name.eta"
    local end copied1; end=$(now); copied1=$(copied_bytes)
    kill -INT $job; wait $job || true
    local seconds; seconds=$(echo "$end - $begin" | bc)
    printf 'loaded    %s: %.0f MiB copied in %.1f s: %.0f MiB/s\n' "$label" "$(echo "($copied1 - $copied0) / 1048576" | bc -l)" \
        "$seconds" "$(echo "($copied1 - $copied0) / 1048576 / $seconds" | bc -l)"
    eta_report loaded "$(copy_end "$D/$name.eta" "$end")" "$end" "$D/$name.eta"
}
init_osd 4
loaded join-read randread "a fifth osd joins under QD1 reads" run_osd 4
report loaded join-read read base-read
fifth=$(osd_id 4)
loaded out-write randwrite "it is marked out under QD1 writes" "$B" -q osd out "$fifth" --api $API
report loaded out-write write base-write

# Scrub idle, then under reads.
begin=$(now)
objects=$("$B" scrub --wait --json --api $API | jq '.objects')
# The objects of every copy are read once each.
seconds=$(echo "$(now) - $begin" | bc)
object_bytes=$("$B" volume info v --json --api $API | jq '.object_size_bytes')
printf 'scrub     idle: %d objects × 3 copies in %.1f s: %.0f MiB/s read\n' "$objects" "$seconds" \
    "$(echo "$objects * 3 * $object_bytes / 1048576 / $seconds" | bc -l)"
if [[ $LOADED_SCRUB == 0 ]]; then exit 0; fi
fio --name=scrub-read --ioengine=nbd --uri=$NBD --rw=randread --bs=4k --iodepth=1 --size="$VOLUME" --time_based \
    --runtime=600 --output-format=json --output="$D/scrub-read.json" &
job=$!
sleep 2
begin=$(now)
"$B" scrub --wait --api $API >/dev/null
seconds=$(echo "$(now) - $begin" | bc)
kill -INT $job; wait $job || true
printf 'scrub     under QD1 reads: %.1f s: %.0f MiB/s read\n' "$seconds" \
    "$(echo "$objects * 3 * $object_bytes / 1048576 / $seconds" | bc -l)"
report scrub scrub-read read base-read
grep -h 'background copies paced' "$D"/osd*.log | tail -5 >&2 || true
EOF
if [[ -n ${KEEP:-} ]]; then
    mkdir -p "$KEEP"
    cp "$dir"/*.eta* "$dir"/eta.txt* "$dir"/*.log "$dir"/*.json "$KEEP"/ 2>/dev/null || true
fi
rm -rf "$dir"
