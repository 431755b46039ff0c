# Sourced by the benchmark scripts, from the repository root: sets `basalt` to the binary to run.
# BASALT_BIN names a given build (to alternate two builds in one sitting); otherwise this tree's
# release build, built first.
if [[ -n ${BASALT_BIN:-} ]]; then
    basalt=$(realpath "$BASALT_BIN")
else
    cargo build --release -p basalt >&2
    basalt=$PWD/target/release/basalt
fi
