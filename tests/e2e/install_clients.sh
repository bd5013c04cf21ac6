#!/usr/bin/env bash
# Installs the real agent clients the end-to-end tests drive, pinned, from the npm registry,
# into a cache outside the repository (one prefix per client, so one bad package does not
# block the others). Idempotent: a client whose pinned version is already there is skipped.
# Always exits 0: a missing client makes its e2e tests skip with the reason, never fail CI.
# Each client's outcome goes to $ROOT/<name>.status, which tests/e2e/e2e_harness.py reads.
# Pins: tests/e2e/clients.txt (shared with the harness).
set -u
ROOT="${RECALLD_E2E_CLIENTS:-$HOME/.cache/recalld-e2e}"
PINS="$(dirname "$0")/clients.txt"
mkdir -p "$ROOT" 2>/dev/null || { echo "install_clients: cannot create $ROOT" >&2; exit 0; }
if ! command -v npm >/dev/null 2>&1; then
    grep -v '^#' "$PINS" | while read -r name _; do
        [ -n "$name" ] && echo "npm not found on PATH" >"$ROOT/$name.status"
    done
    echo "install_clients: npm not found; the e2e tests will skip" >&2
    exit 0
fi
limit() {  # a hung registry must not hang CI
    if command -v timeout >/dev/null 2>&1; then timeout 900 "$@"; else "$@"; fi
}
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
grep -v '^#' "$PINS" | while read -r name pkg version bin; do
    [ -n "$name" ] || continue
    prefix="$ROOT/$name"
    installed=$(node -p "require('$prefix/node_modules/$pkg/package.json').version" 2>/dev/null)
    if [ "$installed" = "$version" ] && [ -x "$prefix/node_modules/.bin/$bin" ]; then
        echo "ok $pkg@$version" >"$ROOT/$name.status"
        echo "install_clients: $pkg@$version already in $prefix"
        continue
    fi
    echo "install_clients: installing $pkg@$version into $prefix"
    log="$ROOT/$name.install.log"
    if limit npm install --prefix "$prefix" --save-exact --loglevel=error \
            "$pkg@$version" >"$log" 2>&1 \
        && [ -x "$prefix/node_modules/.bin/$bin" ]; then
        echo "ok $pkg@$version" >"$ROOT/$name.status"
    else
        echo "npm install $pkg@$version failed: $(tail -n 3 "$log" | tr '\n' ' ')" >"$ROOT/$name.status"
        echo "install_clients: $pkg@$version failed (see $log)" >&2
    fi
done
exit 0
