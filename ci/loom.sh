#!/usr/bin/env bash
# loom models of the frame state word (pin vs eviction, wake-ups, release, write-back lock,
# borrowed readers vs content writers), of
# the benchmarks' ccXArray radix tree (tests/loom.rs), of the cross-process lock words: the one wait loop
# (shm/lock_word.rs) through OwnerLock (exclusion and wake-ups, take-over from a dead holder,
# giving up on a stopped one: shm/owner_lock.rs) and the shared frame's version as a seqlock
# (shared/frame.rs), the shared pin ledgers' handshake with a frame's changers
# (shared/pin_ledger.rs), the range slots' claims with no lock against each other and the
# file lock's taker (shared/ranges.rs), and of the shared segment's ccXArray (shared/tree/loom_models.rs: root
# creation, a leaf's death against an insert into it, expansion against the old root's
# emptying, a stale remove against a clear and the reuse of its nodes), and of the shared
# dirty map's bits and counts against a scan (shared/dirty_map.rs). Exhaustive up to the
# preemption bound; seconds on 2 cores once built.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom
cargo test -p upcache --release --test loom -- --test-threads=1
cargo test -p upcache --release --lib -- --test-threads=1 loom_models
