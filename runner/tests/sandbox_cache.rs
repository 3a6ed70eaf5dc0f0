//! The compiled-component cache on disk: a corrupt, truncated or foreign entry is a miss (the
//! component is compiled again and the entry rewritten), never a crash; a valid entry loads
//! without compiling and is marked as used, so pruning keeps it.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use runner::clock::wall_now;

use runner::RunStatus;
use runner::engine::wasm::{GUEST_SHA256, GUEST_WASM, Source, WasmEngine, WasmLimits};
use serde_json::json;

fn load(dir: &Path) -> (WasmEngine, Source) {
    WasmEngine::load_uncached(GUEST_WASM, GUEST_SHA256, WasmLimits::default(), Some(dir))
        .expect("the sandbox loads whatever the cache holds")
}

fn entry(dir: &Path) -> PathBuf {
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("cache dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

async fn runs(engine: WasmEngine) {
    let (options, _, _) = common::options(Arc::new(engine), json!({"default": {"text": "ok"}}));
    let outcome = common::run(
        "export default function () { return 6 * 7; }",
        json!({}),
        &options,
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.result, Some(json!(42)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_entries_are_misses_and_are_rewritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(load(dir.path()).1, Source::Compiled, "an empty cache");
    let path = entry(dir.path());
    let good = std::fs::read(&path).expect("entry");

    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0xff;
    let damaged: [(&str, Vec<u8>); 4] = [
        ("one byte flipped", flipped),
        ("truncated", good[..good.len() / 3].to_vec()),
        ("empty", Vec::new()),
        (
            "not ours",
            b"\0asm\x0d\0\x01\0 something else entirely".to_vec(),
        ),
    ];
    for (what, bytes) in damaged {
        std::fs::write(&path, &bytes).expect("damage the entry");
        let (engine, source) = load(dir.path());
        assert_eq!(source, Source::Compiled, "{what}: compiled again");
        runs(engine).await;
        assert_eq!(
            std::fs::read(&path).expect("entry").len(),
            good.len(),
            "{what}: the entry was rewritten whole"
        );
        assert_eq!(
            load(dir.path()).1,
            Source::Disk,
            "{what}: and loads next time"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_an_entry_marks_it_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    load(dir.path());
    let path = entry(dir.path());
    let long_ago = wall_now() - Duration::from_secs(60 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(long_ago))
        .expect("age the entry");
    let (engine, source) = load(dir.path());
    assert_eq!(source, Source::Disk);
    runs(engine).await;
    let modified = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .expect("mtime");
    assert!(
        modified > wall_now() - Duration::from_secs(3600),
        "the entry's last use is now"
    );
}
