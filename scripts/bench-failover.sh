#!/usr/bin/env bash
# The stall a guest sees across a failover: fio writes 4 KiB blocks at queue depth 8 through
# `basalt nbd` while an OSD is killed (SIGKILL, then restarted), stopped (SIGSTOP for longer
# than its lease, then SIGCONT) or cut off (iptables drops every packet to it and every packet it
# sends, as a dead link would, then lets them through); the longest write completion of each run
# is its stall. Each run
# is a fresh cluster (mon on its embedded store, three OSDs on files, 3 copies, min_size 2) in a
# network namespace of its own. Prints one line per run, then the median and maximum per fault.
#
# A killed OSD's run also prints, on stderr, how long after its restart every PG was clean again
# (fio still writing) and the objects and bytes the primaries copied to it.
#
# Usage: scripts/bench-failover.sh [DIR]      (as root: it creates network namespaces)
# Env:   BASALT_BIN    the basalt binary (default: built with cargo --release)
#        KILLS=10      SIGKILL runs;  STOPS=3  SIGSTOP runs;  CUTS=3  cut runs (needs iptables)
#        DOWN=3        seconds a killed OSD stays down (DOWN=30 KILLS=1 STOPS=0: the catch-up run)
#        STOP=6        seconds a stopped or cut off one stays so
#        VOLUME=256M   the volume, written whole before the fault; SPAN=VOLUME  the part fio writes
#        OSD_SIZE=1G   each OSD's file
# The catch-up run: DOWN=30 KILLS=1 STOPS=0 VOLUME=1G SPAN=64M OSD_SIZE=4G: the copy should be
# the objects fio wrote during the outage (at most the span), not the volume.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/basalt-bin.sh
. scripts/lib/basalt-bin.sh
dir=${1:-/var/tmp}/bench-failover
kills=${KILLS:-10}
stops=${STOPS:-3}
cuts=${CUTS:-3}

one_run() { # MODE RUN -> prints the longest write completion, ms; removes the run's files
    local mode=$1 d=$dir/$1-$2
    rm -rf "$d"; mkdir -p "$d"
    run_in_namespace "$mode" "$d" || { echo "bench-failover: $mode run $2 failed; its files are in $d" >&2; return 1; }
    rm -rf "$d"
}

run_in_namespace() { # MODE DIR
    local mode=$1 d=$2
    unshare -n bash -s "$basalt" "$d" "$mode" "${DOWN:-3}" "${STOP:-6}" "${VOLUME:-256M}" "${SPAN:-${VOLUME:-256M}}" \
        "${OSD_SIZE:-1G}" <<'EOF'
set -euo pipefail
B=$1 D=$2 MODE=$3 DOWN=$4 STOP=$5 VOLUME=$6 SPAN=$7 OSD_SIZE=$8 API=127.0.0.1:8080
ip link set lo up
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null' EXIT
"$B" mon --api $API --id mon-a --meta-listen 127.0.0.1:2390 --embedded "$D/meta" >"$D/mon.log" 2>&1 & pids+=($!)
until "$B" status --api $API >/dev/null 2>&1; do sleep 0.2; done
# osd 0 runs as a user of its own, so that a cut can name every packet it sends.
cut_uid=64000
for i in 0 1 2; do
    "$B" -q osd init --data "$D/osd$i.img" --size "$OSD_SIZE" >/dev/null
    as=()
    if [[ $i == 0 ]]; then
        chown $cut_uid "$D/osd0.img"
        as=(setpriv --reuid=$cut_uid --regid=$cut_uid --clear-groups)
    fi
    "${as[@]}" "$B" osd --etcd basalt://127.0.0.1:2390 --data "$D/osd$i.img" --listen 127.0.0.$((i + 2)):6800 --host h$i >"$D/osd$i.log" 2>&1 &
    pids+=($!); echo $! >"$D/osd$i.pid"; disown $!
done
until [[ $("$B" osd ls --json --api $API | grep -c '"up": true') == 3 ]]; do sleep 0.2; done
"$B" pool create p --replicas 3 --min-size 2 --pgs 32 --api $API >/dev/null
"$B" volume create v --size "$VOLUME" --pool p --api $API >/dev/null
"$B" nbd --api $API >"$D/nbd.log" 2>&1 & pids+=($!)
all_clean() { "$B" pg ls --json --api $API | jq -e '[.pgs[] | select(.state != "clean")] | length == 0' >/dev/null; }
until all_clean; do sleep 0.2; done
"$B" -q bench --api $API --volume v --rw randread --runtime 1 --prefill >/dev/null
fio --name=w --ioengine=nbd --uri=nbd://127.0.0.1:10809/v --rw=randwrite --bs=4k --iodepth=8 --size="$SPAN" \
    --time_based --runtime=$((DOWN + STOP + 8)) --write_lat_log="$D/lat" --log_avg_msec=0 --output="$D/fio.txt" &
fio=$!
sleep 3
victim=$(cat "$D/osd0.pid")
if [[ $MODE == kill ]]; then
    kill -9 "$victim"; sleep "$DOWN"
    "$B" osd --etcd basalt://127.0.0.1:2390 --data "$D/osd0.img" --listen 127.0.0.2:6800 --host h0 >"$D/osd0.again.log" 2>&1 &
    pids+=($!)
    # How long after the restart every PG is clean again, with fio still writing, and what the
    # primaries copied to the returning OSD.
    started=$(date +%s.%N)
    until all_clean; do sleep 0.2; done
    copied=$(cat "$D"/osd1.log "$D"/osd2.log | grep 'pg recovered' | sed -n 's/.*objects=\([0-9]*\) bytes=\([0-9]*\).*/\1 \2/p' |
        awk '{ o += $1; b += $2 } END { printf "%d objects, %.1f MiB", o, b / 1048576 }')
    echo "clean $(echo "$(date +%s.%N) - $started" | bc) s after the restart; copied $copied" >&2
elif [[ $MODE == stop ]]; then
    kill -STOP "$victim"; sleep "$STOP"; kill -CONT "$victim"
else
    cut=(-d 127.0.0.2 -j DROP) sent=(-m owner --uid-owner $cut_uid -j DROP)
    iptables -I INPUT "${cut[@]}"; iptables -I OUTPUT "${sent[@]}"
    sleep "$STOP"
    iptables -D INPUT "${cut[@]}"; iptables -D OUTPUT "${sent[@]}"
fi
wait $fio 2>/dev/null || true
grep -q "err= 0" "$D/fio.txt" || { echo "fio saw errors" >&2; exit 1; }
awk -F, '{ if ($2 > max) max = $2 } END { printf "%.1f\n", max / 1e6 }' "$D"/lat_clat.*.log
EOF
}

summary() { # NAME VALUES...
    local name=$1; shift
    printf '%s\n' "$@" | sort -n | awk -v name="$name" '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%-8s runs %d  median stall %.1f ms  max %.1f ms\n", name, NR, m, v[NR] }'
}

kill_ms=(); stop_ms=(); cut_ms=()
for ((run = 1; run <= kills; run++)); do
    ms=$(one_run kill "$run"); kill_ms+=("$ms"); echo "kill run $run: longest write $ms ms"
done
for ((run = 1; run <= stops; run++)); do
    ms=$(one_run stop "$run"); stop_ms+=("$ms"); echo "stop run $run: longest write $ms ms"
done
for ((run = 1; run <= cuts; run++)); do
    ms=$(one_run cut "$run"); cut_ms+=("$ms"); echo "cut run $run: longest write $ms ms"
done
echo "bench-failover $(date -u +%F) $(git rev-parse --short HEAD)"
((kills)) && summary SIGKILL "${kill_ms[@]}"
((stops)) && summary SIGSTOP "${stop_ms[@]}"
((cuts)) && summary cut "${cut_ms[@]}"
