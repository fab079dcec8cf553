#!/usr/bin/env bash
# loom models of the frame state word (pin vs eviction, wake-ups, release, write-back lock) and
# of the ccXArray radix tree. Exhaustive up to the preemption bound; ~5 s on 2 cores once built.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p upcache --release --test loom -- --test-threads=1
