#!/usr/bin/env bash
# The C ABI tests: build mnemo-ffi, compile every C program of crates/mnemo-ffi/examples/c
# against libmnemo.so and against libmnemo.a, and run them (pools on /dev/shm):
#   errors     every error path of mnemo.h
#   hashtable  insert/lookup/delete in one run, found again by a second; and a kill -9 loop:
#              run the workload, kill it mid-way, reopen, check invariants and that every
#              acknowledged operation survived
#   mojim      counter with msync, log entry + size with gmsync; a second run checks; and a
#              kill -9 loop (entries complete, counter and size consistent, acks kept)
# Prints "N passed, M failed" last; exits nonzero if any failed.
# Environment: CARGO_TARGET_DIR (respected), KILL_ROUNDS (default 5).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac
libdir=$target/debug
include=$root/crates/mnemo-ffi/include
examples=$root/crates/mnemo-ffi/examples/c
rounds=${KILL_ROUNDS:-5}

echo "building mnemo-ffi"
cargo build -q -p mnemo-ffi || { echo "cargo build failed"; echo "0 passed, 1 failed"; exit 1; }

base=/dev/shm
[ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
tmp=$(mktemp -d "$base/mnemo-c-tests.XXXXXX")
worker=
cleanup() {
    [ -n "$worker" ] && kill -9 "$worker" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
check() { # check NAME COMMAND...: pass if the command succeeds (VERBOSE=1: show output)
    local name=$1; shift
    if "$@" >"$tmp/out" 2>&1; then
        pass "$name"
        if [ -n "${VERBOSE:-}" ]; then sed 's/^/     /' "$tmp/out"; fi
    else
        fail "$name"
        sed 's/^/     /' "$tmp/out"
    fi
}

cflags=(-Wall -Wextra -Werror -O1 -g -I "$include")
mkdir -p "$tmp/bin"
for src in "$examples"/*.c; do
    name=$(basename "$src" .c)
    check "compile $name (shared)" cc "${cflags[@]}" -pthread -o "$tmp/bin/$name-shared" "$src" \
        -L "$libdir" -Wl,-rpath,"$libdir" -lmnemo
    check "compile $name (static)" cc "${cflags[@]}" -pthread -o "$tmp/bin/$name-static" "$src" \
        "$libdir/libmnemo.a" -lpthread -ldl -lm
done
# The example in mnemo.h's opening comment compiles and runs (twice: the counter persists).
{
    printf '#include <mnemo.h>\n#include <stdio.h>\nint main(void)\n{\n'
    sed -n '/In short:/,/mnemo_pool_close(pool);/p' "$include/mnemo.h" | sed '1d; s/^ \*     //; s/^ \*$//' |
        sed "s#/dev/shm/app.pool#$tmp/header-example.pool#g"
    printf '    return 0;\n}\n'
} >"$tmp/header-example.c"
check "compile the example in mnemo.h" cc "${cflags[@]}" -o "$tmp/bin/header-example" \
    "$tmp/header-example.c" -L "$libdir" -Wl,-rpath,"$libdir" -lmnemo
check "run the example in mnemo.h" sh -c "'$tmp/bin/header-example' && '$tmp/bin/header-example'"

if [ -f "$tmp/bin/errors-static" ] && ldd "$tmp/bin/errors-static" | grep -q libmnemo; then
    fail "static binary does not depend on libmnemo.so"
else
    pass "static binary does not depend on libmnemo.so"
fi

expect_output() { # expect_output WANT COMMAND...: the command succeeds and prints WANT
    local want=$1; shift
    local got
    got=$("$@") || return 1
    [ "$got" = "$want" ] || { echo "printed '$got', expected '$want'"; return 1; }
}

expect_status() { # expect_status CODE COMMAND...
    local want=$1; shift
    "$@"; local got=$?
    [ "$got" = "$want" ] || { echo "exit status $got, expected $want"; return 1; }
}

kill_loop() { # kill_loop BINARY POOL: run, kill -9 mid-way, verify; ROUNDS times
    local bin=$1 pool=$2 acked=0 round
    for round in $(seq 1 "$rounds"); do
        "$bin" "$pool" run >"$tmp/acks" 2>"$tmp/worker.err" &
        worker=$!
        sleep "0.$((RANDOM % 4 + 1))"
        kill -9 "$worker" 2>/dev/null
        wait "$worker" 2>/dev/null
        worker=
        local last
        last=$(tail -n 1 "$tmp/acks" 2>/dev/null)
        [[ $last =~ ^[0-9]+$ ]] && acked=$last
        echo "round $round: killed after $acked acknowledged operations"
        "$bin" "$pool" verify "$acked" || return 1
    done
    [ "$acked" -gt 0 ] || { echo "the worker never acknowledged an operation"; return 1; }
    # Finish a fixed number more after the last crash, then verify once more.
    "$bin" "$pool" run $((acked + 100)) >/dev/null || return 1
    "$bin" "$pool" verify $((acked + 100))
}

kill_mojim() { # kill_mojim BINARY POOL: append, kill -9 mid-way, verify; ROUNDS times
    local bin=$1 pool=$2 acked=0 round last
    for round in $(seq 1 "$rounds"); do
        MOJIM_ACK=1 "$bin" "$pool" append 1000000000 >"$tmp/acks" 2>"$tmp/worker.err" &
        worker=$!
        sleep "0.$((RANDOM % 4 + 1))"
        kill -9 "$worker" 2>/dev/null
        wait "$worker" 2>/dev/null
        worker=
        last=$(tail -n 1 "$tmp/acks" 2>/dev/null)
        [[ $last =~ ^[0-9]+$ ]] && acked=$last
        echo "round $round: killed after $acked acknowledged appends"
        "$bin" "$pool" verify "$acked" || return 1
    done
    [ "$acked" -gt 0 ] || { echo "no append was acknowledged"; return 1; }
}

for variant in shared static; do
    bin=$tmp/bin
    [ -x "$bin/errors-$variant" ] || continue
    mkdir -p "$tmp/$variant"
    d=$tmp/$variant

    mkdir -p "$d/errors"
    check "errors ($variant)" "$bin/errors-$variant" "$d/errors"

    ht=$bin/hashtable-$variant
    check "hashtable first run ($variant)" sh -c "
        '$ht' '$d/ht.pool' put apple red &&
        '$ht' '$d/ht.pool' put pear green &&
        '$ht' '$d/ht.pool' put plum purple &&
        '$ht' '$d/ht.pool' put apple crimson &&
        '$ht' '$d/ht.pool' del plum"
    check "hashtable second run finds apple ($variant)" expect_output crimson "$ht" "$d/ht.pool" get apple
    check "hashtable second run finds pear ($variant)" expect_output green "$ht" "$d/ht.pool" get pear
    check "hashtable second run: plum deleted ($variant)" expect_status 3 "$ht" "$d/ht.pool" get plum
    check "hashtable second run: count ($variant)" expect_output 2 "$ht" "$d/ht.pool" count
    check "hashtable workload 2000 ops ($variant)" sh -c "
        '$ht' '$d/work.pool' run 2000 >/dev/null && '$ht' '$d/work.pool' verify 2000"
    check "hashtable kill -9 loop ($variant)" kill_loop "$ht" "$d/kill.pool"

    mj=$bin/mojim-$variant
    check "mojim kill -9 loop ($variant)" kill_mojim "$mj" "$d/mojim-kill.pool"
    check "mojim first run ($variant)" "$mj" "$d/mojim.pool" append 10
    check "mojim second run ($variant)" "$mj" "$d/mojim.pool" append 90
    check "mojim check ($variant)" expect_output "check: ok: 100 accesses, 100 entries logged" \
        "$mj" "$d/mojim.pool" check 100
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
