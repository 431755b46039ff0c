#!/usr/bin/env bash
# The whole test suite: installs what the tests need, then format check, lints and tests.
#
# Usage: scripts/test.sh        (as root on a fresh Debian machine, or with sudo available)
# Env:   BASALT_CRASH_SEEDS     crash-test seeds (default set in the tests; raise for soaks)
#        BASALT_FUZZ_SECONDS    seconds per fuzz target (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
# One build from scratch, not many small edits: incremental state would double the target
# directory (tens of GiB) and slow the build.
export CARGO_INCREMENTAL=0

# Debian packages the tests drive. Installed only when missing, so reruns are fast.
# etcd-server: the etcd the tests start (building needs no protoc: the lint build runs through scripts/without-protoc.sh);
# iproute2, iptables: the network namespaces of the multi-process tests and the links they cut; libnbd-bin, python3-libnbd, nbdkit, qemu-utils: the real NBD clients of the gateway tests;
# fuse3, e2fsprogs, postgresql: PostgreSQL on ext4 on a volume through nbdfuse and a loop device (../shared/rig/pgbench-on-nbd.sh).
packages=(fio jq util-linux iproute2 iptables etcd-server libnbd-bin python3-libnbd nbdkit qemu-utils fuse3 e2fsprogs postgresql)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) == 0 ]] || sudo="sudo"
    echo "test.sh: installing ${missing[*]}"
    $sudo apt-get -o DPkg::Lock::Timeout=300 update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
fi

rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

echo "test.sh: cargo fmt --check"
cargo fmt --all -- --check
echo "test.sh: cargo clippy, with no protoc reachable"
scripts/without-protoc.sh cargo clippy --workspace --all-targets -- -D warnings
# Property tests draw from a fixed seed so a run is reproducible; set PROPTEST_RNG_SEED (and the
# BASALT_*_CASES / BASALT_CRASH_SEEDS counts) to explore further.
export PROPTEST_RNG_SEED=${PROPTEST_RNG_SEED:-20261121}
echo "test.sh: cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --no-fail-fast 2>&1 | tee "$log"
echo "test.sh: fuzz smoke"
scripts/fuzz-smoke.sh "${BASALT_FUZZ_SECONDS:-20}"

# One closing line over every test binary, for readers of the log's last line.
passed=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($(i+1)~/^passed/) s+=$i} END{print s+0}' "$log")
failed=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($(i+1)~/^failed/) s+=$i} END{print s+0}' "$log")
echo "test.sh: all suites done"
echo "tests: $passed passed, $failed failed"
