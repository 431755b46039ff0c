#!/usr/bin/env bash
# Fuzz smoke test: runs every cargo-fuzz target in fuzz/ for a few seconds each.
# A smoke test catches a target that no longer builds or a bug found in seconds; it is not a campaign.
#
# Usage: scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]   (default 20)
# Env:   FUZZ_TARGETS   space-separated targets to run (default: every target `cargo fuzz list` names)
#
# Needs the nightly toolchain (installed if missing) and cargo-fuzz (installed if missing).
# The first build of the targets takes about two minutes on two cores; later builds are incremental.
# A crash leaves its input in fuzz/artifacts/<target>/ and makes this script fail;
# replay it with `cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>`.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-20}"
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds == 0)); then
    echo "fuzz-smoke.sh: SECONDS_PER_TARGET must be a positive integer, got '$seconds'" >&2
    exit 2
fi

toolchains=$(rustup toolchain list)
if ! grep -q '^nightly' <<<"$toolchains"; then
    echo "fuzz-smoke.sh: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

all_targets=$(cargo +nightly fuzz list | sort | tr '\n' ' ')
read -r -a targets <<<"${FUZZ_TARGETS:-$all_targets}"
if ((${#targets[@]} == 0)); then
    echo "fuzz-smoke.sh: no fuzz targets found in fuzz/" >&2
    exit 1
fi
for target in "${targets[@]}"; do
    if [[ " $all_targets " != *" $target "* ]]; then
        echo "fuzz-smoke.sh: no fuzz target named '$target' in fuzz/ (there are: $all_targets)" >&2
        exit 2
    fi
done

for target in "${targets[@]}"; do
    echo "fuzz-smoke.sh: building $target"
    build_start_s=$SECONDS
    cargo +nightly fuzz build "$target"
    echo "fuzz-smoke.sh: built $target in $((SECONDS - build_start_s))s; fuzzing for ${seconds}s"
    # -timeout: one input running over 10 s is a hang. The corpus in fuzz/corpus/<target>
    # persists between runs, so repeated smoke runs keep deepening coverage.
    cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -timeout=10 -print_final_stats=1
done
echo "fuzz-smoke.sh: ${#targets[@]} target(s) ran ${seconds}s each without a failure"
