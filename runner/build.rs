//! Builds the guest component (`runner/guest`, boa plus the shared driver) for `wasm32-wasip2`
//! with a nested cargo in its own target directory (`target/guest`), so it never waits on the
//! outer build's lock and is built once for every profile. Cargo reruns this script only when
//! the guest, the shared driver or the WIT world change.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest's shadow stack (in linear memory). boa re-enters its interpreter for getters and
/// callbacks and recurses in its parser; 8 MiB lets the interpreter's own recursion limit speak
/// first. Deeper still, the guest traps cleanly.
const GUEST_STACK_BYTES: u64 = 8 * 1024 * 1024;

fn main() {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let guest = manifest.join("guest");
    for watched in [
        guest.join("src"),
        guest.join("Cargo.toml"),
        guest.join("Cargo.lock"),
        manifest.join("js/src"),
        manifest.join("js/Cargo.toml"),
        manifest.join("../wit"),
    ] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../target"))
        .join("guest");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&guest)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    without_outer_settings(&mut command);
    command.env(
        "CARGO_ENCODED_RUSTFLAGS",
        format!("-Clink-arg=-zstack-size={GUEST_STACK_BYTES}"),
    );
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the guest component: {e}"));
    if !status.success() {
        panic!(
            "building the guest component failed ({status}); is the wasm32-wasip2 target installed? \
             run `rustup target add wasm32-wasip2`"
        );
    }

    let built = target_dir.join("wasm32-wasip2/release/graph_guest.wasm");
    let out =
        PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("graph_guest.wasm");
    std::fs::copy(&built, &out).unwrap_or_else(|e| {
        panic!(
            "cannot copy the guest component from {}: {e}",
            built.display()
        )
    });
    println!("cargo:rustc-env=GRAPH_GUEST_WASM={}", out.display());
    println!("cargo:rustc-env=GRAPH_GUEST_SHA256={}", sha256_hex(&out));
}

/// Removes the outer build's settings from `command`: the guest has a different target, its
/// own profile, and no clippy or other wrappers.
fn without_outer_settings(command: &mut Command) {
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_BUILD_")
            || key.starts_with("CARGO_TARGET_")
            || key.starts_with("CARGO_FEATURE_")
            || matches!(
                key,
                "RUSTFLAGS"
                    | "CARGO_ENCODED_RUSTFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "RUSTDOCFLAGS"
            )
        {
            command.env_remove(key);
        }
    }
}

fn sha256_hex(path: &Path) -> String {
    use sha2::Digest;
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
