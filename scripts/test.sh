#!/usr/bin/env bash
# Every test of mnemo. Installs what the tests need (Debian packages) by itself, then runs
# the Rust test suite, the C ABI tests and a short smoke run of every fuzz target.
# Needs root: it installs packages and the full-disk test mounts a 1 MiB tmpfs.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

packages=(
    libclang-14-dev   # mnemo analyze: the C front end (loaded at run time)
    clang-14          # mnemo analyze tests: system headers of the C front end
    pmdk-tools        # peer tool in benchmarks and pool-format comparisons
    fonts-dejavu-core # benchmark plots measure text with this font
    redis-tools       # redis-cli and redis-benchmark: real clients of mnemo serve
    redis-server      # differential tests: the same requests against real Redis
    iproute2          # replication netns tests: namespaces, veth pairs (ip), the slow link (tc tbf)
    iptables          # replication netns tests: partitions inside those namespaces
    qemu-system-x86   # persistent VM tests: the guest runs under QEMU (TCG)
    busybox-static    # persistent VM tests: the guest's initramfs (scripts/vm-guest.sh)
    cpio              # persistent VM tests: packing that initramfs
    python3           # scripts/check-no-mutants.sh: the mutant names read from the sources
    etcd-server       # replication failover tests: the configuration store and its leases
    protobuf-compiler # mnemo-repl-etcd: etcd-client generates its gRPC code with protoc
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Tests that need an external program fail instead of skipping when it is missing.
export MNEMO_REQUIRE_TOOLS=1

log "cargo test --workspace"
# The log lives in this checkout's target/ (another checkout's run cannot write into it);
# grep -a: a test's output may hold bytes that make grep call the file binary.
test_log="${CARGO_TARGET_DIR:-target}/mnemo-test.log"
mkdir -p "$(dirname "$test_log")"
cargo test --workspace --no-fail-fast 2>&1 | tee "$test_log"
grep -aE "^test result: " "$test_log" | awk '
    { passed += $4; failed += $6; ignored += $8 }
    END { printf "\nrust tests: %d passed, %d failed, %d ignored\n", passed, failed, ignored }'

log "concurrency under a controlled scheduler (shuttle)"
# Its own target directory and cfg (scripts/test-shuttle.sh); figures in its output.
scripts/test-shuttle.sh

if [ -x scripts/c-tests.sh ]; then
    log "C ABI tests"
    scripts/c-tests.sh
fi

log "no mutant in the product binaries"
scripts/check-no-mutants.sh

if [ -x scripts/fuzz-smoke.sh ]; then
    log "fuzz smoke runs"
    FUZZ_SECONDS="${FUZZ_SECONDS:-15}" scripts/fuzz-smoke.sh
fi
log "all tests passed"
