#!/usr/bin/env bash
# The TypeScript compiler the declarations test (runner/tests/author.rs) checks the example
# graphs with: typescript from npm at one pinned version, installed once per machine under a
# path named by that version. Prints the path of its `tsc` (a node script) on stdout; progress
# goes to stderr. Returns at once when it is installed already.
#
#   node "$(scripts/tsc.sh)" --noEmit -p graphs/jsconfig.json
#
# Needs node and npm (node 18 or newer) and the npm registry the first time. Cache root:
# ${XDG_CACHE_HOME:-~/.cache}/graphrelay/typescript.
set -euo pipefail

VERSION="5.9.3"

say() { printf 'tsc: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v node >/dev/null || die "node not found: install Node.js 18 or newer"
command -v npm >/dev/null || die "npm not found: install npm"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/graphrelay/typescript/$VERSION"
tsc="$dir/node_modules/typescript/bin/tsc"
# Written last, so an interrupted install is never taken for a complete one.
done_marker="$dir/.graphrelay-complete"

if [[ ! -f "$done_marker" ]]; then
    say "installing typescript $VERSION into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --no-save --silent "typescript@$VERSION" >&2
    [[ "$(node "$tsc" --version)" == "Version $VERSION" ]] || die "the installed tsc is not $VERSION"
    touch "$done_marker"
    say "ready"
fi
printf '%s\n' "$tsc"
