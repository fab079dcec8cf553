#!/usr/bin/env bash
# Long crash and power-cut runs (cargo test runs 120 kill points and 40 power cuts):
# a child process doing random record writes and syncs is SIGKILLed at N random points, and
# simulated devices lose their volatile caches at M random points; every synced record must
# survive each. Usage: ci/crash.sh [KILLS] [POWER_CUTS]   (defaults 1000 and 500)
set -euo pipefail
cd "$(dirname "$0")/.."
export UPCACHE_CRASH_KILLS="${1:-1000}" UPCACHE_POWER_CUTS="${2:-500}"
cargo test -p upcache --release --test crash -- random_writes_killed_anywhere_keep_every_synced_record
cargo test -p upcache --release --test sim -- random_power_cuts_keep_every_synced_record
