# Sourced by the benchmark scripts, from the repository root, once `dir` is set: makes `dir`
# fresh and empty, and at exit kills every process whose pid the script added to `pids`, waits
# for them, and removes `dir`.
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
rm -rf "$dir"
mkdir -p "$dir"
