//! Both engines are implementations of one contract: every example graph's test cases end the
//! same way in the sandbox and in-process, case by case (status, result, error, tokens).

use std::path::Path;
use std::sync::Arc;

use runner::engine::EngineKind;
use runner::host::events::NullSink;
use runner::testing::{CaseReport, run_dir};

async fn reports(kind: EngineKind, dir: &Path) -> Vec<CaseReport> {
    let engine = kind.build().expect("the engine starts");
    run_dir(dir, engine, Arc::new(NullSink), None, |_| {})
        .await
        .expect("the graphs folder is readable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_case_ends_identically_in_both_engines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../graphs");
    let wasm = reports(EngineKind::Wasm, &dir).await;
    let boa = reports(EngineKind::Boa, &dir).await;
    assert_eq!(wasm.len(), boa.len());
    // Four example graphs with several cases each: fewer would mean the folder went missing.
    assert!(wasm.len() >= 8, "only {} cases", wasm.len());
    let mut compared = 0;
    for (w, b) in wasm.iter().zip(&boa) {
        assert_eq!(w.name, b.name);
        assert!(w.passed(), "wasm: {}: {:?}", w.name, w.problems);
        assert!(b.passed(), "boa: {}: {:?}", b.name, b.problems);
        let (w_out, b_out) = (
            w.outcome.as_ref().expect("ran in wasm"),
            b.outcome.as_ref().expect("ran in boa"),
        );
        assert_eq!(w_out.status, b_out.status, "{}", w.name);
        assert_eq!(w_out.result, b_out.result, "{}", w.name);
        assert_eq!(w_out.error, b_out.error, "{}", w.name);
        assert_eq!(w_out.total_tokens, b_out.total_tokens, "{}", w.name);
        assert_eq!(w_out.reported_cost, b_out.reported_cost, "{}", w.name);
        compared += 1;
    }
    assert_eq!(compared, wasm.len());
}
