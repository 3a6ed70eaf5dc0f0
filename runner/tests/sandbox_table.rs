//! The table "which limits only the wasm engine enforces" in docs/limits.md is generated from
//! the hostile-script catalog, whose every case the `sandbox_*.rs` files run and assert in
//! both engines. This test keeps the three in step: the table must be exactly what the catalog
//! says, and every case must be run by one test of its guarantee's file. If a guarantee stops
//! holding, its `sandbox_*.rs` test fails; if someone edits the catalog to make it pass, this
//! one fails until the table says so too.
//!
//! To print the table: `cargo test -p runner --test suite sandbox_table -- --nocapture`.
//!
//! The limits table's rows (docs/limits.md) on the wasm engine's caches and clock are checked
//! the same way: generated from the constants that enforce them.

use crate::hostile;

use hostile::{Boa, CASES, Guarantee, Wasm};

fn wasm_column(wasm: Wasm) -> String {
    match wasm {
        Wasm::Fails(needle) => format!("failed: `{needle}`"),
        Wasm::Completes(_) => "completed with the expected result".to_owned(),
    }
}

fn boa_column(boa: Boa) -> String {
    match boa {
        Boa::Fails(needle) => format!("failed: `{needle}`"),
        Boa::Completes(_) => "completed with the same result".to_owned(),
        Boa::DeadlineOnly => {
            "failed at the deadline, **but the interpreter thread runs on**".to_owned()
        }
        Boa::Aborts(needle) => format!("**the whole process aborts** (`{needle}`)"),
    }
}

fn table() -> String {
    let mut out = String::from(
        "| hostile script | wasm engine (contained, host survives) | boa in-process (child process) | only wasm contains it |\n\
         | --- | --- | --- | --- |\n",
    );
    for case in CASES {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            case.class,
            wasm_column(case.wasm),
            boa_column(case.boa),
            if case.only_wasm_contains() {
                "**yes**"
            } else {
                "no"
            }
        ));
    }
    out
}

/// The table lives in docs/limits.md since the README and ARCHITECTURE.md were split into docs/
/// pages; the test kept its name.
#[test]
fn architecture_md_has_the_table_the_suite_observed() {
    let table = table();
    println!("{table}");
    let doc = include_str!("../../docs/limits.md");
    assert!(
        doc.contains(&table),
        "docs/limits.md does not hold the table generated from runner/tests/hostile; replace it with:\n\n{table}"
    );
}

#[test]
fn every_case_is_run_by_one_test_of_its_guarantee() {
    let files = [
        (Guarantee::Cpu, include_str!("sandbox_cpu.rs")),
        (Guarantee::Memory, include_str!("sandbox_memory.rs")),
        (Guarantee::Recursion, include_str!("sandbox_recursion.rs")),
        (
            Guarantee::Capabilities,
            include_str!("sandbox_capabilities.rs"),
        ),
        (Guarantee::Tampering, include_str!("sandbox_tampering.rs")),
        (Guarantee::Output, include_str!("sandbox_output.rs")),
    ];
    for case in CASES {
        let call = format!("check(\"{}\")", case.id);
        for (guarantee, source) in files {
            let expected = usize::from(guarantee == case.guarantee);
            assert_eq!(
                source.matches(&call).count(),
                expected,
                "{}: run by {expected} test(s) of the {guarantee:?} file",
                case.id
            );
        }
    }
    let ids: std::collections::HashSet<_> = CASES.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), CASES.len(), "case ids are unique");
    // The issue asks for at least 25 hostile scripts.
    assert!(CASES.len() >= 25, "{}", CASES.len());
}

/// The limits table's rows on the epoch tick and the in-memory component cache, from the
/// constants the code enforces.
fn cache_rows() -> [String; 2] {
    use runner::engine::wasm::{DEFAULT_MAX_COMPONENTS, EPOCH_TICK};
    [
        format!(
            "| wasm: deadline and cancel granularity | {} ms epoch tick | `engine/wasm/limits.rs` |",
            EPOCH_TICK.as_millis()
        ),
        format!(
            "| wasm: compiled components kept in memory | {DEFAULT_MAX_COMPONENTS} per `ComponentCache` (the runner CLI's; the desktop's compiled graphs', as many as it keeps loaded), the least recently used dropped first and read from the disk cache when asked for again | `engine/wasm/components.rs` |"
        ),
    ]
}

#[test]
fn the_limits_table_has_the_cache_limits_the_code_enforces() {
    let doc = include_str!("../../docs/limits.md");
    for row in cache_rows() {
        assert!(
            doc.contains(&row),
            "docs/limits.md's limits table lacks the row the code gives; replace it with:\n\n{row}"
        );
    }
}
