#!/usr/bin/env bash
# The Node MCP clients the acceptance tests drive (relay/tests/node_clients.rs): the official
# TypeScript SDK and the MCP Inspector's CLI, exactly as tests/node/package-lock.json pins them
# (with a node 22 from npm, which the Inspector's CLI needs; the SDK runs on Debian's node).
# Installed once per machine under a path keyed by the lock's hash, so a changed pin makes a new
# install instead of patching an old one. Prints that directory on stdout (its node_modules holds
# the packages, node_modules/.bin/node is node 22); progress goes to stderr. Returns at once when
# the install is already complete.
#
#   GRAPHRELAY_NODE_MCP="$(scripts/node-mcp.sh)"
#
# Needs node and npm (node 20 or newer) and the npm registry the first time. Cache root:
# ${XDG_CACHE_HOME:-~/.cache}/graphrelay/node-mcp.
set -euo pipefail
cd "$(dirname "$0")/.."

LOCK="tests/node/package-lock.json"

say() { printf 'node-mcp: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v node >/dev/null || die "node not found: install Node.js 20 or newer"
command -v npm >/dev/null || die "npm not found: install npm"
hash="$(cat tests/node/package.json "$LOCK" | sha256sum | cut -c1-16)"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/graphrelay/node-mcp/$hash"
# Written last, so an interrupted install is never taken for a complete one.
done_marker="$dir/.graphrelay-complete"

if [[ ! -f "$done_marker" ]]; then
    say "installing the pinned MCP clients into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp tests/node/package.json "$LOCK" "$dir/"
    npm ci --prefix "$dir" --no-audit --no-fund --silent >&2
    [[ "$("$dir/node_modules/.bin/node" --version)" == v22.* ]] || die "npm's node is not node 22"
    [[ -f "$dir/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js" ]] \
        || die "the TypeScript SDK is not installed"
    [[ -f "$dir/node_modules/@modelcontextprotocol/inspector/package.json" ]] \
        || die "the Inspector is not installed"
    touch "$done_marker"
    say "ready"
fi
printf '%s\n' "$dir"
