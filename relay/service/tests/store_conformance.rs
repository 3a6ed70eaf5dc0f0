//! Every store keeps the promises of the conformance suite; the SQLite store also keeps its
//! data across a reopen.

use std::sync::Arc;

use relay_service::store::{SqliteStore, Store, conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_store_passes_the_suite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let counter = std::sync::atomic::AtomicUsize::new(0);
    conformance::run_all(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let store = SqliteStore::open(&dir.path().join(format!("store-{n}.db"))).expect("open");
        Arc::new(store) as Arc<dyn Store>
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_store_passes_the_suite() {
    conformance::run_all(|| {
        Arc::new(SqliteStore::open_in_memory().expect("open")) as Arc<dyn Store>
    })
    .await;
}

#[tokio::test]
async fn sqlite_store_keeps_data_across_reopen_and_migrates_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("relay.db");
    let now = relay_protocol::clock::Timestamp::from_unix_millis(1_000);
    let owner = {
        let store = SqliteStore::open(&path).expect("open");
        store.ensure_owner("alice", now).await.expect("owner")
    };
    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(
        store.ensure_owner("alice", now).await.expect("owner"),
        owner
    );
}
