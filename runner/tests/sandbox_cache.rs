//! The compiled-component caches. On disk: a corrupt, truncated or foreign entry is a miss (the
//! component is compiled again and the entry rewritten), never a crash; a valid entry loads
//! without compiling and is marked as used, so pruning keeps it. In memory (`ComponentCache`, an
//! object its caller owns): bounded, the least recently used dropped first and loaded again
//! from disk; one component compiled once for callers asking at the same time; one wasmtime
//! engine for every component of one configuration.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use runner::clock::wall_now;

use runner::RunStatus;
use runner::engine::wasm::{
    ComponentCache, GUEST_SHA256, GUEST_WASM, Source, WasmEngine, WasmLimits,
};
use serde_json::json;

fn load(dir: &Path) -> (WasmEngine, Source) {
    // A new cache each time: nothing in memory, so the disk decides.
    ComponentCache::with_disk_cache(1, Some(dir.to_path_buf()))
        .load(GUEST_WASM, GUEST_SHA256, WasmLimits::default())
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

/// Limits with fuel on: compiled code of its own, so another key of the same component.
fn with_fuel() -> WasmLimits {
    WasmLimits {
        fuel: Some(u64::MAX / 4),
        ..WasmLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_cache_keeps_its_bound_and_loads_what_it_dropped_from_disk() {
    let cache = ComponentCache::new(1);
    let (first, _) = cache.load_generic(WasmLimits::default()).expect("loads");
    let (again, source) = cache.load_generic(WasmLimits::default()).expect("loads");
    assert_eq!(source, Source::Memory, "kept in memory");
    let (fuel, source) = cache.load_generic(with_fuel()).expect("loads");
    assert_ne!(source, Source::Memory, "another key");
    assert_eq!(cache.len(), 1, "one at most");
    let (_, source) = cache.load_generic(WasmLimits::default()).expect("loads");
    assert_eq!(
        source,
        Source::Disk,
        "dropped from memory, read from disk again"
    );
    // Engines handed out before keep running whatever the cache dropped.
    for engine in [first, again, fuel] {
        runs(engine).await;
    }
    let two = ComponentCache::new(2);
    two.load_generic(WasmLimits::default()).expect("loads");
    two.load_generic(with_fuel()).expect("loads");
    let (_, source) = two.load_generic(WasmLimits::default()).expect("loads");
    assert_eq!(source, Source::Memory, "room for both");
    assert_eq!(two.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_at_the_same_time_share_one_load() {
    let cache = ComponentCache::new(4);
    let barrier = std::sync::Barrier::new(4);
    let sources: Vec<Source> = std::thread::scope(|scope| {
        let loads: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    cache.load_generic(WasmLimits::default()).expect("loads").1
                })
            })
            .collect();
        loads
            .into_iter()
            .map(|load| load.join().expect("no panic"))
            .collect()
    });
    let loaded = sources.iter().filter(|s| **s != Source::Memory).count();
    assert_eq!(loaded, 1, "one load, the others waited for it: {sources:?}");
    assert_eq!(cache.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_of_one_configuration_share_one_wasmtime_engine() {
    let cache = ComponentCache::new(4);
    let generic = cache.generic(WasmLimits::default()).expect("loads");
    let (plain, _) = cache
        .load(GUEST_WASM, GUEST_SHA256, WasmLimits::default())
        .expect("loads");
    let (fuel, _) = cache.load_generic(with_fuel()).expect("loads");
    // Another cache, the same configuration: still the same engine.
    let other = ComponentCache::new(1)
        .generic(WasmLimits::default())
        .expect("loads");
    assert!(wasmtime::Engine::same(generic.wasmtime(), plain.wasmtime()));
    assert!(wasmtime::Engine::same(generic.wasmtime(), other.wasmtime()));
    assert!(!wasmtime::Engine::same(generic.wasmtime(), fuel.wasmtime()));
    for engine in [generic, plain, fuel, other] {
        runs(engine).await;
    }
}
