#!/usr/bin/env bash
# Checks Cargo.lock offline with cargo-deny (deny.toml): RustSec advisories from the snapshot
# in ../shared/advisory-db (or $UPCACHE_ADVISORY_DB), licences, duplicate versions, sources.
# Installs the pinned cargo-deny under target/tools the first time (about 2 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.20.2
tools="$PWD/target/tools"
deny="$tools/bin/cargo-deny"
if ! "$deny" --version 2>/dev/null | grep -qx "cargo-deny $version"; then
    cargo install --locked --quiet cargo-deny --version "$version" --root "$tools"
fi

# The snapshot sits beside the repository (../shared); from a git worktree elsewhere, beside
# the main checkout.
snapshot=""
for candidate in "${UPCACHE_ADVISORY_DB:-}" "$PWD/../shared/advisory-db" \
    "$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)/../../shared/advisory-db" \
    /work/shared/advisory-db; do
    if [ -n "$candidate" ] && [ -d "$candidate/crates" ]; then
        snapshot="$candidate"
        break
    fi
done
if [ -z "$snapshot" ]; then
    echo "ci/deny.sh: no advisory database in ../shared/advisory-db (set UPCACHE_ADVISORY_DB)" >&2
    exit 1
fi
echo "ci/deny.sh: advisories from $snapshot ($(head -c 80 "$snapshot/SNAPSHOT" 2>/dev/null || true))"

# cargo-deny reads its database as a git clone named after the database's URL (this name is
# cargo-deny $version's for the default RustSec URL) and dates it by its HEAD commit, so the
# snapshot becomes one commit dated as the snapshot says.
db="target/advisory-db/advisory-db-3157b0e258782691"
rm -rf "$db"
mkdir -p "$(dirname "$db")"
cp -r "$snapshot" "$db"
chmod -R u+w "$db"
stamp=$(grep -o '20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]' "$snapshot/SNAPSHOT" | head -1 || true)
stamp="${stamp:-1970-01-01}T00:00:00Z"
(
    cd "$db"
    git init -q
    git add -A
    GIT_AUTHOR_DATE="$stamp" GIT_COMMITTER_DATE="$stamp" \
        git -c user.name=ci -c user.email=ci@localhost -c commit.gpgsign=false \
        commit -q -m "RustSec snapshot of $stamp"
)

"$deny" --offline --locked --color never check advisories bans licenses sources
