#!/usr/bin/env bash
# Smoke-runs every cargo-fuzz target in fuzz/Cargo.toml for FUZZ_SECONDS each (default 20).
# Fails if a target fails to build or finds a crash; the crashing input is left in
# fuzz/artifacts/<target>/ and its path is printed. Installs cargo-fuzz if it is missing.
# A libFuzzer dictionary in fuzz/dicts/<target>.dict is used when present.
#
# The stable toolchain is enough: RUSTC_BOOTSTRAP=1 unlocks the nightly-only sanitizer
# flags cargo-fuzz passes to rustc.
#
#   scripts/fuzz-smoke.sh                  # every target, 20 s each
#   FUZZ_SECONDS=300 scripts/fuzz-smoke.sh resp_decode   # one target, longer
set -euo pipefail

seconds="${FUZZ_SECONDS:-20}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
if [ "${#targets[@]}" -eq 0 ]; then
    echo "fuzz-smoke: no fuzz targets found" >&2
    exit 1
fi

failed=()
for target in "${targets[@]}"; do
    echo "fuzz-smoke: $target for ${seconds}s" >&2
    log="$(mktemp)"
    # -max_total_time bounds the run; -timeout flags a single input that hangs for 10 s.
    options=(-max_total_time="$seconds" -timeout=10)
    if [ -f "dicts/$target.dict" ]; then
        options+=(-dict="dicts/$target.dict")
    fi
    if cargo fuzz run "$target" -- "${options[@]}" >"$log" 2>&1; then
        grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 | sed "s/^/fuzz-smoke: $target: /" >&2 || true
    else
        tail -n 40 "$log" >&2
        echo "fuzz-smoke: $target FAILED (artifacts in $root/fuzz/artifacts/$target/)" >&2
        failed+=("$target")
    fi
    rm -f "$log"
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz-smoke: failed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz-smoke: ${#targets[@]} target(s) ran ${seconds}s each without a crash" >&2
