#!/usr/bin/env bash
# The service's container image (relay/Containerfile), built and checked as CI does:
#   1. a release build of the service-only `relay` (--no-default-features: no runner, wasmtime or
#      boa) for x86_64-unknown-linux-musl, static, in its own target folder (target/image) so it
#      never evicts the debug build's cache;
#   2. `podman build` of the FROM-scratch Containerfile with that binary and the CA roots;
#   3. the image checked the way these machines allow (`podman run` cannot set rlimits here):
#      `podman save`, each layer of manifest.json untarred into one root folder, and the binary
#      run from that folder under chroot: `serve --help`, then `serve` answering GET /healthz.
# First, quick to fail, the examples in relay/deploy/ are checked by their own tools:
# `systemd-analyze verify` (relay.service), `nginx -t` (nginx.conf, with a certificate made by
# docs/deploy.md's command), `caddy validate` (Caddyfile, compose.Caddyfile) and a YAML parse
# of compose.yaml.
# Prints the binary's size and the image's tag. Needs root (apt-get, podman, chroot), as .ci/run.
# IMAGE=name:tag picks the tag (default graphrelay-relay:ci).
set -euo pipefail
cd "$(dirname "$0")/.."

# The deploy examples through their own checkers, in the scratch folder $1.
check_deploy_examples() {
    local dir=$1 deploy=relay/deploy
    # verify wants the ExecStart program to exist; the unit is otherwise checked as shipped.
    sed 's#/usr/local/bin/relay#/bin/true#' "$deploy/relay.service" >"$dir/relay.service"
    systemd-analyze verify "$dir/relay.service" >&2
    # The certificate command of docs/deploy.md#tls (the same flags, a scratch folder).
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
        -subj /CN=relay.internal -addext "subjectAltName=DNS:relay.internal,IP:10.0.0.11" \
        -addext "basicConstraints=critical,CA:FALSE" -addext "extendedKeyUsage=serverAuth" \
        -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
    sed "s#/etc/relay/tls#$dir#" "$deploy/nginx.conf" >"$dir/nginx.conf"
    nginx -q -t -c "$dir/nginx.conf" -g "pid $dir/nginx.pid; error_log stderr;" >&2
    caddy validate --adapter caddyfile --config "$deploy/Caddyfile" >/dev/null 2>&1 ||
        caddy validate --adapter caddyfile --config "$deploy/Caddyfile" >&2
    RELAY_PUBLIC_HOST=relay.example.com caddy validate --adapter caddyfile \
        --config "$deploy/compose.Caddyfile" >/dev/null 2>&1 ||
        RELAY_PUBLIC_HOST=relay.example.com caddy validate --adapter caddyfile \
            --config "$deploy/compose.Caddyfile" >&2
    python3 -c '
import sys, yaml
services = yaml.safe_load(open(sys.argv[1]))["services"]
relays = [s for s in services.values() if s.get("command", [None])[0] == "serve"]
assert "db" in services and len(relays) == 2, "compose.yaml: PostgreSQL and two replicas"
' "$deploy/compose.yaml"
    echo "image: relay/deploy examples pass systemd-analyze, nginx -t, caddy validate" >&2
}
image="${IMAGE:-graphrelay-relay:ci}"
target=x86_64-unknown-linux-musl
missing=()
command -v musl-gcc >/dev/null || missing+=(musl-tools)
command -v podman >/dev/null || missing+=(podman)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v nginx >/dev/null || missing+=(nginx)
command -v caddy >/dev/null || missing+=(caddy)
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
python3 -c "import yaml" 2>/dev/null || missing+=(python3-yaml)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
rustup target add "$target" >&2

export CARGO_TARGET_DIR="$PWD/target/image"
work="$CARGO_TARGET_DIR/work"
rm -rf "$work"
mkdir -p "$work/deploy" "$work/context/data" "$work/rootfs"
check_deploy_examples "$work/deploy"
# ring, SQLite and jemalloc compile C for the target with Debian's musl wrapper.
export CC_x86_64_unknown_linux_musl=musl-gcc
# No debug symbols in the image; the size printed below is the stripped binary's.
export CARGO_PROFILE_RELEASE_STRIP=symbols
start=$SECONDS
cargo build --release --locked -p relay --no-default-features --target "$target" >&2
echo "image: release build of the service-only binary: $((SECONDS - start)) s" >&2
binary="$CARGO_TARGET_DIR/$target/release/relay"
if readelf -l "$binary" | grep -q 'program interpreter'; then
    echo "image: $binary is dynamically linked; the scratch image has no loader" >&2
    exit 1
fi
echo "image: service-only relay binary (musl, static, stripped): $(stat -c %s "$binary") bytes" >&2

cp "$binary" "$work/context/relay"
cp /etc/ssl/certs/ca-certificates.crt "$work/context/"
podman build --quiet -t "$image" -f relay/Containerfile "$work/context" >&2
podman save --format docker-archive -o "$work/image.tar" "$image" >&2
mkdir "$work/saved"
tar -xf "$work/image.tar" -C "$work/saved"
# manifest.json: [{"Layers": ["<layer>.tar", ...], ...}], base layer first.
python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))[0]["Layers"]))' \
    "$work/saved/manifest.json" | while read -r layer; do
    tar -xf "$work/saved/$layer" -C "$work/rootfs"
done
echo "image: $image ($(du -sb "$work/image.tar" | cut -f1) bytes saved); root folder $work/rootfs" >&2

# The root folder holds the binary, the roots and /data only: chroot proves the binary needs
# nothing else (no loader, no libc, no shell).
chroot "$work/rootfs" /relay serve --help | grep -q -- '--public-url' || {
    echo "image: /relay serve --help from the image's root folder did not print the serve flags" >&2
    exit 1
}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$work/serve.log"
SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt chroot --userspec=65532:65532 "$work/rootfs" \
    /relay serve --db /data/relay.db --listen "127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
health=""
for _ in $(seq 1 100); do
    if health=$(curl -fsS "http://127.0.0.1:$port/healthz" 2>/dev/null); then
        break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "image: relay serve from the image's root folder exited:" >&2
        cat "$log" >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$health" ]; then
    echo "image: relay serve from the image's root folder never answered /healthz:" >&2
    cat "$log" >&2
    exit 1
fi
kill "$pid"
wait "$pid" || true
echo "image: /healthz from the image's binary: $health" >&2
echo "$image"
