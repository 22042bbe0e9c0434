#!/usr/bin/env bash
# The main job: mnemo on an embedded pool under ./mnemo-data (created on first start).
# Extra arguments are passed to the command.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
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
