#!/usr/bin/env bash
# Mutant code never ships (issue 19). Builds the products, `mnemo` and `libmnemo.so`, in
# release in one cargo command with mnemo-testkit, which turns the `mutants` features on
# (Cargo unifies the features of every package one command builds), and checks that neither
# binary holds the name of any mutant or durability site the sources define. A release
# build compiles every mutant check to `false` whatever its features (they also need debug
# assertions), so the names must be gone.
#
#   scripts/check-no-mutants.sh            # build, then check
#   scripts/check-no-mutants.sh BIN...     # check these files only
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then
    cargo build --release -q -p mnemo-cli -p mnemo-ffi -p mnemo-testkit
    target="${CARGO_TARGET_DIR:-target}/release"
    set -- "$target/mnemo" "$target/libmnemo.so"
fi
names="$(python3 - <<'PY'
import pathlib, re
names = {"ack_before_sync", "release_unacked", "MNEMO_KV_MUTANT_UNSAFE"}
for path in pathlib.Path("crates").rglob("*.rs"):
    if "tests" in path.parts:
        continue
    text = path.read_text()
    names.update(re.findall(r'mutant::active\(\s*"([^"]+)"', text))
    names.update("site:" + m for m in re.findall(r'durable_site!\(\s*"([^"]+)"', text))
    for block in re.findall(r'const KNOWN: &\[&str\] = &\[(.*?)\];', text, re.S):
        names.update(re.findall(r'"([^"]+)"', block))
print("\n".join(sorted(names)))
PY
)"
count="$(echo "$names" | wc -l)"
[ "$count" -ge 20 ] || { echo "check-no-mutants: only $count names found in the sources" >&2; exit 1; }
found=0
for bin in "$@"; do
    [ -f "$bin" ] || { echo "check-no-mutants: $bin missing" >&2; exit 1; }
    while IFS= read -r name; do
        if grep -qaF -- "$name" "$bin"; then
            echo "check-no-mutants: $bin holds the mutant name \"$name\"" >&2
            found=$((found + 1))
        fi
    done <<<"$names"
done
# The shuttle scheduler (the concurrency tests' `--cfg mnemo_shuttle` builds) never ships
# either: that cfg is set only by scripts/test-shuttle.sh, in its own target directory.
for bin in "$@"; do
    if grep -qaF -- "shuttle_engine" "$bin"; then
        echo "check-no-mutants: $bin holds the shuttle scheduler" >&2
        found=$((found + 1))
    fi
done
if [ "$found" -gt 0 ]; then
    echo "check-no-mutants: $found mutant names in product binaries" >&2
    exit 1
fi
echo "check-no-mutants: none of $count mutant names in $*"
