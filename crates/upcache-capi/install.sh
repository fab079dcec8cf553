#!/usr/bin/env bash
# Installs the C ABI: the header, the shared library under its soname (with the usual
# links), the static library and a pkg-config file (upcache.pc).
#
#   crates/upcache-capi/install.sh [PREFIX] [BUILD_DIR]
#
# PREFIX defaults to /usr/local. BUILD_DIR is where the libraries are (default: build them
# with `cargo build --release -p upcache-capi` and take target/release). Afterwards:
#   PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs upcache
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
prefix="${1:-/usr/local}"
build="${2:-}"
if [ -z "$build" ]; then
    (cd "$root" && cargo build --release -p upcache-capi)
    build="$root/target/release"
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)"
# The soname build.rs gave the library: installed under that name, as the loader looks it up.
so="$(readelf -d "$build/libupcache_capi.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
[ -n "$so" ] || { echo "install.sh: $build/libupcache_capi.so has no soname" >&2; exit 1; }

install -d "$prefix/include" "$prefix/lib/pkgconfig"
install -m 0644 "$here/include/upcache.h" "$prefix/include/upcache.h"
install -m 0755 "$build/libupcache_capi.so" "$prefix/lib/$so"
ln -sf "$so" "$prefix/lib/libupcache_capi.so"
install -m 0644 "$build/libupcache_capi.a" "$prefix/lib/libupcache_capi.a"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$here/upcache.pc.in" > "$prefix/lib/pkgconfig/upcache.pc"
echo "installed upcache $version in $prefix ($so, libupcache_capi.a, include/upcache.h, lib/pkgconfig/upcache.pc)"
