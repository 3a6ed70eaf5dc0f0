//! `relay desktop run` takes the same agent-provider flags and providers file as `runner run`
//! (`runner/tests/provider_*.rs` test the providers themselves); a bad file or flag stops it
//! before it contacts the service.

use std::process::{Command, Output};

fn desktop_run(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("desktop")
        .arg("--state")
        .arg(dir.join("desktop.db"))
        .args(["run", "--service", "http://127.0.0.1:9", "--token", "grd_x"])
        .args(args)
        .env_remove("RELAY_SERVICE_URL")
        .env_remove("RELAY_DESKTOP_TOKEN")
        .output()
        .expect("run relay")
}

#[test]
fn the_desktop_relay_reads_the_providers_file_and_flags() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("providers.toml");
    std::fs::write(
        &file,
        "[providers.local]\nkind = \"openai\"\napi_key = \"sk-do-not-print-me\"\n",
    )
    .expect("file");
    let output = desktop_run(dir.path(), &["--providers", file.to_str().expect("utf-8")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("never read from files"), "{stderr}");
    assert!(!stderr.contains("sk-do-not-print-me"), "{stderr}");

    let output = desktop_run(dir.path(), &["--provider", "anthropic"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--model"),
        "a provider needs a model"
    );

    let output = desktop_run(
        dir.path(),
        &[
            "--provider",
            "openai",
            "--model",
            "m",
            "--replies",
            "r.json",
        ],
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be used with"));
}
