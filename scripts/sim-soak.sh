#!/usr/bin/env bash
# A long campaign of the whole-cluster simulation (crates/sim-cluster, ADR 0020): SEEDS seeds
# from FIRST, each run twice (their traces must hash alike), with faults; stops at the first
# failing seed and prints the command that replays it. Reports seeds per second.
#
# Usage: scripts/sim-soak.sh [SEEDS] [FIRST]      (default 10000 from 1)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-10000}
first=${2:-1}
cargo build --release -p sim-cluster --tests >&2
started=$(date +%s.%N)
BASALT_SIM_SEEDS=$seeds BASALT_SIM_FIRST=$first \
    cargo test --release -q -p sim-cluster --test seeds -- --nocapture
seconds=$(echo "$(date +%s.%N) - $started" | bc)
printf 'sim-soak: seeds %d to %d passed in %.0f s: %.1f seeds/s (each run twice)\n' \
    "$first" "$((first + seeds - 1))" "$seconds" "$(echo "$seeds / $seconds" | bc -l)"
