#!/usr/bin/env bash
# The Python environment the OAuth acceptance tests drive the MCP Python SDK from: a venv with
# exactly tests/python/requirements.txt (every package pinned), made once per machine and kept
# under a path keyed by that file's hash and the interpreter's version, so a changed pin makes a
# new venv instead of patching an old one. Prints the venv's python on stdout; progress goes to
# stderr. Returns at once when the venv is already complete.
#
#   GRAPHRELAY_PYTHON="$(scripts/python-env.sh)"
#
# Needs python3 (3.10 or newer, for mcp; GRAPHRELAY_PYTHON_BASE names another interpreter) and
# PyPI the first time. Cache root:
# ${XDG_CACHE_HOME:-~/.cache}/graphrelay/python.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUIREMENTS="tests/python/requirements.txt"
PYTHON="${GRAPHRELAY_PYTHON_BASE:-python3}"

say() { printf 'python-env: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.10 or newer"
version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$PYTHON is Python $version; the mcp SDK needs 3.10 or newer"
hash="$(sha256sum "$REQUIREMENTS" | cut -c1-16)"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/graphrelay/python/py$version-$hash"
# Written last, so a venv whose install was interrupted is never taken for a complete one.
done_marker="$venv/.graphrelay-complete"

if [[ ! -f "$done_marker" ]]; then
    say "creating $venv (Python $version, $REQUIREMENTS)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --requirement "$REQUIREMENTS" >&2
    "$venv/bin/python" -c 'import mcp.client.auth, mcp.client.streamable_http, httpx2' \
        || die "the installed SDK does not import"
    touch "$done_marker"
    say "ready"
fi
printf '%s\n' "$venv/bin/python"
