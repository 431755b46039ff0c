# Sourced by the benchmark scripts that run one `basalt dev` (after basalt-bin.sh, with `dir` set):
# `start_dev ARGS...` starts it on a fresh `$dir` and waits until it serves; `stop_dev` stops it
# (also on exit, which removes `$dir`).
dev_pid=
stop_dev() {
    [[ -n $dev_pid ]] && kill -INT "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null || true
    dev_pid=
}
trap 'stop_dev; rm -rf "$dir"' EXIT

start_dev() {
    rm -rf "$dir"
    mkdir -p "$dir"
    "$basalt" dev --data "$dir" "$@" >"$dir/dev.log" 2>&1 &
    dev_pid=$!
    for _ in $(seq 1 600); do grep -q "ready" "$dir/dev.log" && break; sleep 0.2; done
    grep -q "ready" "$dir/dev.log" || { echo "$0: basalt dev did not start" >&2; cat "$dir/dev.log" >&2; exit 1; }
}
