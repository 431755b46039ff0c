#!/usr/bin/env bash
# Builds the workspace (every target) as a machine with no protobuf compiler would: PROTOC unset
# and every `protoc` on PATH replaced, in a private mount namespace, by one that fails. The etcd
# gRPC stubs are checked in (ADR 0014); this keeps a dependency that runs protoc at build time
# from coming back unnoticed.
#
# Usage: scripts/check-no-protoc.sh   (as root, or with sudo: the mount namespace needs it)
# Builds into target/no-protoc, so that no build script's earlier output is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} != --inside ]]; then
    sudo=""
    [[ $(id -u) == 0 ]] || sudo="sudo --preserve-env=PATH,HOME,CARGO_HOME,RUSTUP_HOME"
    exec $sudo unshare --mount --propagation private "$0" --inside
fi

# The stand-in stays in the build directory: a file mounted over another cannot be removed.
mkdir -p target/no-protoc
fake=$PWD/target/no-protoc/protoc-absent
printf '#!/bin/sh\necho "protoc is not available to this build" >&2\nexit 1\n' >"$fake"
chmod +x "$fake"
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    if [[ -x $dir/protoc ]]; then
        mount --bind "$fake" "$dir/protoc"
        echo "check-no-protoc: hid $dir/protoc"
    fi
done
unset PROTOC PROTOC_INCLUDE
if command -v protoc >/dev/null && protoc --version >/dev/null 2>&1; then
    echo "check-no-protoc: a working protoc is still reachable" >&2
    exit 1
fi
cargo check --workspace --all-targets --target-dir target/no-protoc
echo "check-no-protoc: the workspace builds with no protoc"
