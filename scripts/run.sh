#!/usr/bin/env bash
# The main job: mnemo on an embedded pool under ./mnemo-data (created on first start).
# Extra arguments are passed to the command.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# Building needs protoc: mnemo-repl-etcd's etcd client generates its gRPC code at build time.
if ! command -v protoc >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
    else
        echo "run.sh: building mnemo needs protoc: apt-get install protobuf-compiler" >&2
        exit 1
    fi
fi
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli
mnemo="${CARGO_TARGET_DIR:-$repo/target}/release/mnemo"
mkdir -p mnemo-data
chmod 700 mnemo-data
if "$mnemo" help serve >/dev/null 2>&1; then
    exec "$mnemo" serve --pool mnemo-data/mnemo.pool "$@"
fi
# Until the key-value server lands: a pool round trip that survives restarts.
pool=mnemo-data/mnemo.pool
[ -e "$pool" ] || "$mnemo" pool create "$pool" --size 64M --layout mnemo-demo
"$mnemo" pool counter "$pool"
"$mnemo" pool check "$pool"
"$mnemo" pool info "$pool"
