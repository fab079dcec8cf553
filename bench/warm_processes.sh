#!/usr/bin/env bash
# Warm across processes (issue 17): one fio process writes and reads a 512 MiB file once, then
# 2 fio job processes read it at random (4 KiB, psync, --invalidate=0, 5 s). The kernel's page
# cache, then the shim's shared cache (every process attached to one service), in turn, for
# ROUNDS rounds; prints IOPS and shim/kernel per round. Usage: bench/warm_processes.sh [ROUNDS]
# (builds the shim; data in a temporary directory on the file system of $TMPDIR).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p upcache-preload --lib
SHIM=$PWD/target/release/libupcache_preload.so
D=$(mktemp -d "${TMPDIR:-/tmp}/upcache-warm.XXXXXX")
trap 'rm -rf "$D"' EXIT

run() { # kernel | shim
    rm -rf "$D/d"
    mkdir -p "$D/d"
    sync
    local pre=()
    if [ "$1" = shim ]; then
        pre=(env LD_PRELOAD="$SHIM" UPCACHE_MEMORY=1G UPCACHE_IDLE=2 UPCACHE_SOCKET="$D/service/s.sock"
             UPCACHE_PREFIX="$D/d")
    fi
    local common=(--name=warm --directory="$D/d" --filename=warm.dat --size=512m --ioengine=psync
                  --invalidate=0)
    (cd "$D/d" && "${pre[@]}" fio "${common[@]}" --bs=1m --rw=read >/dev/null)
    (cd "$D/d" && "${pre[@]}" fio "${common[@]}" --bs=4k --rw=randread --numjobs=2 --time_based \
        --runtime=5 --group_reporting --output-format=json) |
        python3 -c "import json, sys; print(int(json.load(sys.stdin)['jobs'][0]['read']['iops']))"
}

echo "shmem THP: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || echo '?')"
for r in $(seq "${1:-3}"); do
    k=$(run kernel)
    s=$(run shim)
    echo "round $r: kernel $k IOPS, shim $s IOPS, shim/kernel $(python3 -c "print(f'{$s / $k:.2f}x')")"
done
