#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets: catalog and metadata-log decoding, the C ABI's
# argument checks) for a bounded time each; a finding fails the script and leaves the input
# in fuzz/artifacts/<target>/. cargo-fuzz needs nightly features; on a stable toolchain
# RUSTC_BOOTSTRAP=1 unlocks them. Usage: ci/fuzz.sh [SECONDS_PER_TARGET] (default 60)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-60}"
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in $(cargo fuzz list); do
    if ! cargo fuzz run -O "$target" -- -max_total_time="$secs" >"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "fuzz: $target failed; the input is in fuzz/artifacts/$target" >&2
        exit 1
    fi
    echo "fuzz: $target: $(grep -E '^Done' "$log" | tail -1)"
done
