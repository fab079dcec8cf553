#!/usr/bin/env bash
# Unmodified programs through the LD_PRELOAD shim (issue 7): fio (psync and pvsync2, randrw,
# 4 jobs, crc32c verify), the sqlite3 CLI (10,000 inserts, integrity_check) and RocksDB's
# db_bench (fillrandom, then readrandom), each checked for correctness and timed with and
# without the shim. Usage: ci/programs.sh [ROUNDS] [DIR]   (default 1 round, in a temporary
# directory; throughput figures are medians over the rounds, run interleaved).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=""
command -v fio >/dev/null || missing="$missing fio"
command -v sqlite3 >/dev/null || missing="$missing sqlite3"
command -v db_bench >/dev/null || missing="$missing rocksdb-tools"
command -v python3 >/dev/null || missing="$missing python3"
if [ -n "$missing" ]; then
    apt-get update -qq && apt-get install -y -qq $missing >/dev/null
fi
cargo build -q --release -p upcache-preload --lib
exec python3 ci/programs.py --shim target/release/libupcache_preload.so --rounds "${1:-1}" ${2:+--dir "$2"}
