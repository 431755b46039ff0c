#!/usr/bin/env bash
# Runs a command as a machine with no protobuf compiler would: PROTOC unset and every `protoc`
# on PATH replaced, in a private mount namespace, by one that fails. The etcd gRPC stubs are
# checked in (ADR 0014); `scripts/test.sh` runs its lint build through this, so a dependency
# that runs protoc at build time cannot come back unnoticed (on a clean clone every build
# script runs in that build).
#
# Usage: scripts/without-protoc.sh COMMAND...   (default: cargo check --workspace --all-targets)
# As root the namespace is the machine's own; otherwise a user namespace maps the caller to root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} != --inside ]]; then
    if [[ $(id -u) == 0 ]]; then
        exec unshare --mount --propagation private "$0" --inside "$@"
    fi
    exec unshare --map-root-user --mount --propagation private "$0" --inside "$@"
fi
shift
(($#)) || set -- cargo check --workspace --all-targets

# The stand-in stays in the build directory: a file mounted over another cannot be removed.
mkdir -p target
fake=$PWD/target/protoc-absent
printf '#!/bin/sh\necho "protoc is not available to this build" >&2\nexit 1\n' >"$fake"
chmod +x "$fake"
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    if [[ -x $dir/protoc ]]; then
        mount --bind "$fake" "$dir/protoc"
        echo "without-protoc: hid $dir/protoc"
    fi
done
unset PROTOC PROTOC_INCLUDE
if command -v protoc >/dev/null && protoc --version >/dev/null 2>&1; then
    echo "without-protoc: a working protoc is still reachable" >&2
    exit 1
fi
exec "$@"
