//! `runner run`'s graphs folder is read on the run's first nested call, once.

use crate::common;

use std::sync::Arc;

use runner::Meta;
use runner::RunStatus;
use serde_json::json;

/// An engine that counts how often it is asked for a graph's `meta`.
struct CountingDescribes {
    inner: Arc<dyn runner::engine::Engine>,
    describes: Arc<std::sync::atomic::AtomicUsize>,
}

impl runner::engine::Engine for CountingDescribes {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn run(
        &self,
        script: Arc<str>,
        args: String,
        invocation: runner::host::Invocation,
    ) -> runner::host::approvals::BoxFuture<'static, Result<String, runner::engine::EngineError>>
    {
        self.inner.run(script, args, invocation)
    }
    fn describe(
        &self,
        script: Arc<str>,
    ) -> runner::host::approvals::BoxFuture<'static, Result<Meta, graph_js::MetaError>> {
        self.describes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.describe(script)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphs_folder_is_read_only_on_the_first_nested_call_and_only_once() {
    use runner::host::graphs::{DESCRIBE_TIMEOUT, LazyFolderCatalog};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("countdown.js"), common::COUNTDOWN).expect("countdown");
    std::fs::write(dir.path().join("loop.js"), common::SELF_CALLING).expect("loop");
    std::fs::write(dir.path().join("broken.js"), "export const meta = {").expect("broken");
    for inner in common::engines() {
        let describes = Arc::new(AtomicUsize::new(0));
        let engine: Arc<dyn runner::engine::Engine> = Arc::new(CountingDescribes {
            inner,
            describes: describes.clone(),
        });
        let (mut options, _, _) = common::options(engine.clone(), json!({}));
        options.catalog = Arc::new(LazyFolderCatalog::new(
            dir.path().to_path_buf(),
            engine,
            DESCRIBE_TIMEOUT,
        ));
        // A run that calls no other graph never evaluates the folder's files.
        let plain = common::run("export default () => 7", json!({}), &options).await;
        assert_eq!(plain.result, Some(json!(7)), "{plain:?}");
        assert_eq!(describes.load(Ordering::SeqCst), 0);
        // Concurrent nested calls, an unknown slug among them: the folder is read once.
        let outcome = common::run(
            r#"export default async function (a, g) {
                const [x, y, z] = await Promise.allSettled([
                    g.graph("countdown", {n: 2}), g.graph("countdown", {n: 1}), g.graph("nope", {}),
                ]);
                return [x.value, y.value, z.reason.code, z.reason.message];
            }"#,
            json!({}),
            &options,
        )
        .await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        let result = outcome.result.expect("result");
        assert_eq!(result[0], json!([2, 1, "done"]));
        assert_eq!(result[1], json!([1, "done"]));
        assert_eq!(result[2], "not_found");
        assert_eq!(
            result[3],
            format!(
                "there is no graph with slug nope in the graphs folder {} (it has countdown, loop); --graphs DIR names another folder",
                dir.path().display()
            )
        );
        assert_eq!(
            describes.load(Ordering::SeqCst),
            3,
            "three files, each read once"
        );
    }
}

/// A folder catalog indexes graphs by slug and reports the files it skipped.
#[tokio::test]
async fn folder_catalog_indexes_by_slug_and_reports_skips() {
    use runner::host::graphs::{Catalog, DESCRIBE_TIMEOUT, FolderCatalog};

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("a.js"),
        "export const meta = {name: 'A', slug: 'alpha', version: '1'};\nexport default async function () { return 1; }",
    )
    .expect("a");
    std::fs::write(dir.path().join("broken.js"), "export const meta = {").expect("broken");
    std::fs::write(dir.path().join("notes.txt"), "not a graph").expect("txt");
    let engine = runner::engine::boa::BoaEngine::default();
    let catalog = FolderCatalog::load(dir.path(), &engine, DESCRIBE_TIMEOUT)
        .await
        .expect("loads");
    assert!(catalog.lookup("alpha").await.is_ok());
    // The skipped file named for the slug is the graph meant: its own error is told (issue 45).
    let broken = catalog.lookup("broken").await.unwrap_err();
    assert_eq!(broken.code.as_str(), "failed");
    let file = dir.path().join("broken.js").display().to_string();
    assert!(
        broken.message.starts_with(&format!("{file}:1:")),
        "{broken}"
    );
    assert!(
        broken.message.contains("; graph broken cannot load: fix "),
        "{broken}"
    );
    let missing = catalog.lookup("nothing").await.unwrap_err();
    assert_eq!(missing.code.as_str(), "not_found");
    assert!(missing.message.contains("(it has alpha)"), "{missing}");
    assert_eq!(catalog.skipped().len(), 1);
}
