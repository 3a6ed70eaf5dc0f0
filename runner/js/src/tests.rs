//! Driver tests against a scripted in-memory host: the same driver runs in both engines.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use super::*;

mod web;

/// A host whose work finishes in the order it was started, with canned outcomes.
#[derive(Default)]
struct ScriptedHost {
    next: u32,
    done: VecDeque<(u32, Result<String, Failure>)>,
    started: Vec<String>,
    logs: Rc<RefCell<Vec<String>>>,
    interrupt_after_jobs: Option<String>,
    /// The scripted run clock: milliseconds since the run started (each sleep adds its delay).
    clock_ms: u64,
    /// The scripted random source's state (its seed to begin with).
    random_state: u64,
}

/// The scripted host's wall clock at the start of a run: 2026-01-01T00:00:00Z.
const SCRIPTED_START_MS: i64 = 1_767_225_600_000;

impl ScriptedHost {
    fn start(&mut self, what: String, outcome: Result<String, Failure>) -> Result<u32, Failure> {
        self.next += 1;
        self.started.push(what);
        self.done.push_back((self.next, outcome));
        Ok(self.next)
    }
}

impl Host for ScriptedHost {
    fn start_agent(&mut self, request: AgentRequest) -> Result<u32, Failure> {
        if request.prompt == "refuse" {
            return Err(Failure::budget_exhausted("cap reached"));
        }
        let reply = serde_json::json!({"text": format!("re: {}", request.prompt), "tokens": 3, "label": request.label});
        self.start(format!("agent:{}", request.prompt), Ok(reply.to_string()))
    }
    fn start_tool(&mut self, name: &str, args: &str) -> Result<u32, Failure> {
        if name == "fs.write" {
            return self.start(format!("tool:{name}"), Err(Failure::denied("not allowed")));
        }
        self.start(format!("tool:{name}:{args}"), Ok(args.to_owned()))
    }
    fn start_graph(&mut self, slug: &str, args: &str) -> Result<u32, Failure> {
        self.start(format!("graph:{slug}"), Ok(args.to_owned()))
    }
    fn start_sleep(&mut self, ms: u32) -> Result<u32, Failure> {
        self.clock_ms += u64::from(ms);
        self.start(format!("sleep:{ms}"), Ok("null".to_owned()))
    }
    fn clock_now(&mut self) -> ClockReading {
        ClockReading {
            wall_ms: SCRIPTED_START_MS + self.clock_ms as i64,
            monotonic_ms: self.clock_ms,
        }
    }
    fn random_bytes(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            self.random_state = splitmix64(self.random_state);
            chunk.copy_from_slice(&self.random_state.to_le_bytes()[..chunk.len()]);
        }
    }
    fn wait_any(&mut self, handles: &[u32]) -> (u32, Result<String, Failure>) {
        let position = self.done.iter().position(|(h, _)| handles.contains(h));
        match position.and_then(|p| self.done.remove(p)) {
            Some(done) => done,
            None => (0, Err(Failure::invalid("nothing to wait for"))),
        }
    }
    fn tokens_used(&mut self) -> u64 {
        42
    }
    fn token_cap(&mut self) -> Option<u64> {
        Some(100)
    }
    fn log(&mut self, message: &str) {
        self.logs.borrow_mut().push(message.to_owned());
    }
    fn interrupted(&mut self) -> Option<String> {
        self.interrupt_after_jobs.clone()
    }
}

/// `script` with a `meta` export added at its end when it has none (so no line or column of it
/// moves): every run checks the graph's meta, and most tests are about something else.
pub(crate) fn with_meta(script: &str) -> String {
    let has_meta = [
        "export const meta",
        "export let meta",
        "export var meta",
        "export { meta",
    ]
    .iter()
    .any(|form| script.contains(form));
    // An empty script is a compiled graph's: it holds its own meta.
    if has_meta || script.is_empty() {
        script.to_owned()
    } else {
        format!(
            "{script}\nexport const meta = {{name: \"Test\", slug: \"test\", version: \"1\"}};\n"
        )
    }
}

fn run_with(script: &str, host: ScriptedHost) -> Result<serde_json::Value, ScriptError> {
    run(&with_meta(script), "{}", Box::new(host), &Limits::default())
        .map(|text| serde_json::from_str(&text).expect("result is JSON"))
}

/// The sentence a run that must fail fails with.
fn failure(script: &str, host: ScriptedHost) -> String {
    match run_with(script, host) {
        Ok(value) => panic!("the graph completed with {value}"),
        Err(e) => e.to_string(),
    }
}

fn run_ok(script: &str) -> serde_json::Value {
    run_with(script, ScriptedHost::default()).expect("graph completes")
}

#[test]
fn returns_the_default_exports_value_as_json() {
    let out =
        run_ok("export default async function (args, g) { return { a: 1, b: [true, null] }; }");
    assert_eq!(out, serde_json::json!({"a": 1, "b": [true, null]}));
}

#[test]
fn undefined_result_is_null_and_sync_functions_work() {
    assert_eq!(
        run_ok("export default function () {}"),
        serde_json::Value::Null
    );
}

#[test]
fn arguments_reach_the_graph() {
    let text = run(
        &with_meta("export default async function (args) { return args.x * 2; }"),
        r#"{"x": 21}"#,
        Box::new(ScriptedHost::default()),
        &Limits::default(),
    )
    .expect("runs");
    assert_eq!(text, "42");
}

#[test]
fn agents_resolve_with_host_replies_and_run_in_parallel() {
    let out = run_ok(
        r#"export default async function (args, g) {
            const [a, b] = await Promise.all([g.agent({prompt: "one", label: "x"}), g.agent("two")]);
            return [a.text, a.label, b.text];
        }"#,
    );
    assert_eq!(out, serde_json::json!(["re: one", "x", "re: two"]));
}

#[test]
fn refusals_reject_with_a_code() {
    let out = run_ok(
        r#"export default async function (args, g) {
            const codes = [];
            try { await g.agent("refuse"); } catch (e) { codes.push(e.code); }
            try { await g.tool("fs.write", {path: "x"}); } catch (e) { codes.push(e.code); }
            try { await g.agent({prompt: ""}); } catch (e) { codes.push(e.code); }
            try { await g.retry(() => 1, {attempts: 11}); } catch (e) { codes.push(e.code); }
            return codes;
        }"#,
    );
    assert_eq!(
        out,
        serde_json::json!(["budget_exhausted", "denied", "invalid", "invalid"])
    );
}

#[test]
fn an_uncaught_rejection_fails_the_run_with_its_code() {
    let err = failure(
        "export default async function (args, g) { await g.tool('fs.write', {}); }",
        ScriptedHost::default(),
    );
    assert_eq!(err, "denied: not allowed");
}

#[test]
fn retry_repeats_until_success_and_stops_on_final_codes() {
    let out = run_ok(
        r#"export default async function (args, g) {
            let calls = 0;
            const v = await g.retry(async (n) => { calls++; if (n < 3) throw new Error("flaky"); return n; }, {attempts: 5, delayMs: 10});
            let denied = 0;
            try { await g.retry(async () => { denied++; return g.tool("fs.write", {}); }, {attempts: 4}); } catch (e) {}
            return {v, calls, denied};
        }"#,
    );
    assert_eq!(out, serde_json::json!({"v": 3, "calls": 3, "denied": 1}));
}

#[test]
fn budget_reports_the_host_figures() {
    let out = run_ok(
        "export default async function (a, g) { g.log('hi', {x: 1}); console.log('c'); return g.budget(); }",
    );
    assert_eq!(out, serde_json::json!({"used": 42, "cap": 100}));
}

#[test]
fn replacing_prelude_functions_changes_nothing_on_the_host() {
    // The script can only see `g`; rewriting globals does not reach the natives.
    let out = run_ok(
        r#"export default async function (args, g) {
            try { g.agent = () => "forged"; } catch (e) {}
            JSON.stringify = () => "forged";
            Promise.prototype.then = undefined;
            return typeof globalThis.startAgent + "/" + (Object.isFrozen(g) ? "frozen" : "open");
        }"#,
    );
    assert_eq!(out, serde_json::json!("undefined/frozen"));
}

#[test]
fn syntax_errors_name_line_and_column() {
    let err = failure(
        "export default async function () {\n  return 1 +;\n}",
        ScriptedHost::default(),
    );
    assert!(err.starts_with("graph.js:2:"), "{err}");
    assert!(err.contains(": syntax error: "), "{err}");
    assert!(err.contains("\n  2 |   return 1 +;\n"), "{err}");
}

#[test]
fn every_form_of_default_export_runs() {
    for (script, expected) in [
        ("export default async function (a, g) { return 1; }", 1),
        ("export default async function main(a, g) { return 2; }", 2),
        ("export default (a, g) => 3;", 3),
        // boa does not parse these two itself (see `default_async_arrow`).
        ("export default async (args, g) => {\n  return 4;\n}", 4),
        (
            "const x = 1;\nexport   default\tasync args => 4 + x; // export default async",
            5,
        ),
        (
            "async function h() { return 6; }\nexport { h as default };",
            6,
        ),
        (
            "/* ü → ü */ export default async (a, g) => 8; /* export default async */",
            8,
        ),
    ] {
        assert_eq!(run_ok(script), serde_json::json!(expected), "{script}");
    }
    // Meta and top-level code around the moved export keep working.
    let out = run_ok(
        "export const meta = {name: 'A', slug: 'a', version: '1'};\nconst twice = (n) => 2 * n;\nexport default async (args, g) => twice(21)\n// the end",
    );
    assert_eq!(out, serde_json::json!(42));
}

#[test]
fn a_broken_async_arrow_keeps_its_own_syntax_error() {
    // Still wrong once the export is moved: the error is boa's first one, not one about the
    // moved text.
    let err = failure(
        "export default async (args, g) => {\n  return 1 +;\n}",
        ScriptedHost::default(),
    );
    assert!(err.starts_with("graph.js:1:"), "{err}");
    assert!(err.contains(": syntax error: "), "{err}");
    assert!(!err.contains("__graphrelay"), "{err}");
    // Two default exports stay an error.
    let err = failure(
        "export default async () => 1;\nexport default async function () { return 2; }",
        ScriptedHost::default(),
    );
    assert!(err.contains(": syntax error: "), "{err}");
    // `async` as a plain name after `export default` is left alone.
    assert_eq!(
        run_ok("const asyncish = () => 7;\nexport default asyncish;"),
        serde_json::json!(7)
    );
}

#[test]
fn a_timer_set_at_module_top_level_fails_there() {
    let err = failure(
        "setTimeout(() => {}, 1);\nexport default function () { return 1; }",
        ScriptedHost::default(),
    );
    assert!(
        err.contains("setTimeout: host work cannot start at module top level"),
        "{err}"
    );
    let out = run_ok(
        "let code;\ntry { setTimeout(() => {}, 1); } catch (e) { code = e.code; }\nexport default () => code;",
    );
    assert_eq!(out, serde_json::json!("invalid"));
    let err = failure(
        "setInterval(() => {}, 1);\nexport default function () { return 1; }",
        ScriptedHost::default(),
    );
    assert!(
        err.contains("setInterval: host work cannot start at module top level"),
        "{err}"
    );
}

/// A run checks the graph as `describe` does, with the same sentences, before its default
/// export is called.
#[test]
fn a_run_refuses_a_graph_whose_meta_describe_refuses() {
    let refused = |script: &str| {
        let ran = run(
            script,
            "{}",
            Box::new(ScriptedHost::default()),
            &Limits::default(),
        )
        .expect_err("refused");
        let described = describe(script, &Limits::default()).expect_err("refused");
        assert_eq!(ran.to_string(), described.to_string(), "{script}");
        ran.to_string()
    };
    let missing = refused("globalThis.ran = 0; export default () => { throw new Error('ran'); };");
    assert!(
        missing.starts_with("the graph has no meta export"),
        "{missing}"
    );
    let invalid = refused(
        "export const meta = {name: 'x', slug: 'Bad Slug', version: '1'};\nexport default () => { throw new Error('ran'); };",
    );
    assert!(invalid.contains("meta.slug `Bad Slug`"), "{invalid}");
    let no_default = refused("export const meta = {name: 'x', slug: 'x', version: '1'};");
    assert!(no_default.contains("no default export"), "{no_default}");
}

#[test]
fn a_missing_default_export_is_explained() {
    let err = failure(
        "export const meta = {name: 'N', slug: 'n', version: '1'};",
        ScriptedHost::default(),
    );
    assert!(err.contains("no default export"), "{err}");
}

#[test]
fn an_infinite_loop_hits_the_loop_limit() {
    let err = failure(
        "export default function () { while (true) {} }",
        ScriptedHost::default(),
    );
    assert!(err.contains("loop iteration limit"), "{err}");
}

#[test]
fn the_loop_limit_cannot_be_caught() {
    let err = failure(
        "export default function () { for (let i = 0; i < 3; i++) { try { while (true) {} } catch (e) {} } return 'escaped'; }",
        ScriptedHost::default(),
    );
    assert!(err.contains("loop iteration limit"), "{err}");
}

#[test]
fn unbounded_recursion_hits_the_recursion_limit() {
    let err = failure(
        "function f() { return f() + 1; } export default () => f();",
        ScriptedHost::default(),
    );
    assert!(err.contains("recursion limit"), "{err}");
}

#[test]
fn an_endless_promise_chain_is_interrupted_by_the_host() {
    let host = ScriptedHost {
        interrupt_after_jobs: Some("cancelled: stop".to_owned()),
        ..ScriptedHost::default()
    };
    let err = failure(
        "function f() { return Promise.resolve().then(f); } export default () => f();",
        host,
    );
    assert_eq!(err, "cancelled: stop");
}

#[test]
fn awaiting_a_promise_nothing_settles_is_an_error_not_a_hang() {
    let err = failure(
        "export default () => new Promise(() => {});",
        ScriptedHost::default(),
    );
    assert!(err.contains("nothing will ever settle"), "{err}");
}

#[test]
fn imports_and_outside_capabilities_are_absent() {
    let out = run_ok(
        r#"export default async function () {
            let dynamic;
            try { await import("fs"); dynamic = "loaded"; } catch (e) { dynamic = "refused"; }
            return [dynamic, typeof require, typeof process, typeof fetch, typeof WebAssembly, typeof Deno];
        }"#,
    );
    assert_eq!(
        out,
        serde_json::json!([
            "refused",
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            "undefined"
        ])
    );
    let err = failure(
        "import fs from 'fs'; export default () => 1;",
        ScriptedHost::default(),
    );
    assert!(err.contains("module"), "{err}");
}

#[test]
fn a_result_over_the_limit_is_refused() {
    let err = failure(
        "export default () => { let s = 'x'; while (s.length < 11 * 1024 * 1024) s = s + s; return s; }",
        ScriptedHost::default(),
    );
    assert!(err.contains("result limit exceeded"), "{err}");
}

#[test]
fn describe_reads_and_validates_meta() {
    let meta = describe(
        "export const meta = {name: 'Triage', slug: 'triage', version: '1.0.0', description: 'd'};\nexport default () => 1;",
        &Limits::default(),
    )
    .expect("valid meta");
    assert_eq!(meta.slug, "triage");
    let bad = describe(
        "export const meta = {name: 'x', slug: 'Bad Slug', version: '1'};",
        &Limits::default(),
    );
    assert!(matches!(bad, Err(MetaError::Invalid(_))), "{bad:?}");
    let missing = describe("export default () => 1;", &Limits::default());
    assert_eq!(missing, Err(MetaError::Missing));
    let syntax = describe("export const meta = {;", &Limits::default());
    assert!(
        matches!(&syntax, Err(MetaError::Script(e)) if e.starts_with("graph.js:1:23: syntax error")),
        "{syntax:?}"
    );
}

#[test]
fn log_lines_are_cut_to_the_limit_counting_characters_not_utf16_units() {
    let host = ScriptedHost::default();
    let logs = host.logs.clone();
    let script = format!(
        "export default function (a, g) {{
            g.log('a'.repeat({max}));
            g.log('\\u{{1F600}}'.repeat({max} + 10));
            g.log('b'.repeat(5e6));
        }}",
        max = MAX_LOG_LINE_CHARS
    );
    run_with(&script, host).expect("graph completes");
    let logs = logs.borrow();
    assert_eq!(
        logs[0],
        "a".repeat(MAX_LOG_LINE_CHARS),
        "a line at the limit is kept whole"
    );
    assert_eq!(
        logs[1],
        format!("{}…", "\u{1F600}".repeat(MAX_LOG_LINE_CHARS))
    );
    assert_eq!(logs[2], format!("{}…", "b".repeat(MAX_LOG_LINE_CHARS)));
}

#[test]
fn lone_surrogates_leave_the_graph_as_replacement_characters() {
    // `"😀".slice(0, 1)` is half an emoji: a lone surrogate, which JSON.stringify escapes and
    // a Rust string cannot hold. It used to fail the result and every call it was sent with.
    let out = run_ok(
        r#"export default async function (args, g) {
            const cut = "😀".slice(0, 1);
            const agent = (await g.agent({prompt: "say " + cut})).text;
            const tool = await g.tool("fs.read", {path: "\udc00" + cut});
            const graph = await g.graph("other", {cut});
            return {agent, tool, graph, low: "x\udc00", pair: "\ud83d\ude00", text: "\\ud800",
                    ["k" + cut]: 1};
        }"#,
    );
    assert_eq!(
        out,
        serde_json::json!({
            "agent": "re: say \u{FFFD}",
            "tool": {"path": "\u{FFFD}\u{FFFD}"},
            "graph": {"cut": "\u{FFFD}"},
            "low": "x\u{FFFD}",
            "pair": "\u{1F600}",
            "text": "\\ud800",
            "k\u{FFFD}": 1
        })
    );
}

#[test]
fn well_formed_replaces_only_lone_surrogate_escapes() {
    for (text, expected) in [
        (r#""\ud800""#, r#""\ufffd""#),
        (r#""a\uDC00b\ud800""#, r#""a\ufffdb\ufffd""#),
        (r#""\ud83d\ude00""#, r#""\ud83d\ude00""#),
        (r#""\ud83d\ud83d\ude00""#, r#""\ufffd\ud83d\ude00""#),
        (r#""\ude00\ud83d""#, r#""\ufffd\ufffd""#),
        (r#""\\ud800""#, r#""\\ud800""#),
        (r#""\\\ud800""#, r#""\\\ufffd""#),
        (r#""é\ud800é""#, r#""é\ufffdé""#),
        (r#""\u00e9\ud8""#, r#""\u00e9\ud8""#),
        (r#""\ud8zz""#, r#""\ud8zz""#),
        ("\\ud", "\\ud"),
        ("\\", "\\"),
    ] {
        assert_eq!(well_formed(text.to_owned()), expected, "{text}");
    }
}

#[test]
fn a_number_json_cannot_hold_is_named_as_itself_in_messages() {
    let out = run_ok(
        r#"export default async function (args, g) {
            const said = [];
            for (const n of [NaN, Infinity, 0.5]) {
              try { await g.agent({prompt: "p", maxTokens: n}); } catch (e) { said.push(e.message); }
            }
            return said;
        }"#,
    );
    assert_eq!(
        out,
        serde_json::json!([
            "g.agent.maxTokens must be a positive integer, got NaN",
            "g.agent.maxTokens must be a positive integer, got Infinity",
            "g.agent.maxTokens must be a positive integer, got 0.5"
        ])
    );
    let thrown = failure(
        "export default async function () { throw NaN; }",
        ScriptedHost::default(),
    );
    assert_eq!(thrown, "NaN");
}

#[test]
fn array_from_async_collects_async_and_sync_iterables_and_array_likes() {
    let out = run_ok(
        r#"export default async function () {
            async function* letters() { yield "a"; await null; yield "b"; }
            let closed = false;
            function* numbers() { try { yield 1; yield 2; } finally { closed = true; } }
            class Sub extends Array {}
            const bad = Array.fromAsync(null);
            const mapped = await Array.fromAsync(numbers(), () => { throw new Error("mapfn failed"); })
                .catch((e) => e.message);
            return {
                generator: await Array.fromAsync(letters()),
                awaited: await Array.fromAsync([Promise.resolve(1), 2]),
                mapped: await Array.fromAsync([1, 2], async (x, i) => x * 10 + i),
                thisArg: await Array.fromAsync([1], function (x) { return this.k + x; }, { k: 5 }),
                arrayLike: await Array.fromAsync({ length: 2, 0: "x", 1: Promise.resolve("y") }),
                subclass: (await Array.fromAsync.call(Sub, [1])) instanceof Sub,
                rejection: await Array.fromAsync([Promise.reject(new Error("boom"))]).catch((e) => e.message),
                badIsPromise: bad instanceof Promise,
                bad: await bad.catch((e) => e instanceof TypeError),
                badMapfn: await Array.fromAsync([1], 5).catch((e) => e instanceof TypeError),
                mapfnError: mapped,
                iteratorClosed: closed,
                shape: [Array.fromAsync.length, Array.fromAsync.name, Object.keys(Array).includes("fromAsync")],
            };
        }"#,
    );
    assert_eq!(
        out,
        serde_json::json!({
            "generator": ["a", "b"],
            "awaited": [1, 2],
            "mapped": [10, 21],
            "thisArg": [6],
            "arrayLike": ["x", "y"],
            "subclass": true,
            "rejection": "boom",
            "badIsPromise": true,
            "bad": true,
            "badMapfn": true,
            "mapfnError": "mapfn failed",
            "iteratorClosed": true,
            "shape": [1, "fromAsync", false],
        })
    );
}

#[test]
fn math_random_and_crypto_draw_from_the_hosts_random_source() {
    let script = r#"export default function () {
        const r = [Math.random(), Math.random()];
        return {
            r,
            inRange: r.every((x) => x >= 0 && x < 1),
            uuid: crypto.randomUUID(),
            bytes: Array.from(crypto.getRandomValues(new Uint8Array(4))),
            shape: [typeof Math.random, Math.random.name, Math.random.length, Object.keys(Math).includes("random")],
        };
    }"#;
    let seeded = |seed| {
        run_with(
            script,
            ScriptedHost {
                random_state: seed,
                ..Default::default()
            },
        )
        .expect("graph completes")
    };
    let (a, again, other) = (seeded(7), seeded(7), seeded(8));
    assert_eq!(a, again);
    assert_ne!(a["r"], other["r"]);
    assert_ne!(a["uuid"], other["uuid"]);
    assert_eq!(a["inRange"], true);
    assert_eq!(
        a["shape"],
        serde_json::json!(["function", "random", 0, false])
    );
}

#[test]
fn top_level_code_reads_the_run_clock_but_starts_no_work() {
    let out = run_ok(
        r#"const at = Date.now();
        let refused;
        try { setTimeout(() => {}, 1); } catch (e) { refused = e.code; }
        export default function () { return { at, refused }; }"#,
    );
    assert_eq!(
        out,
        serde_json::json!({"at": SCRIPTED_START_MS, "refused": "invalid"})
    );
}

#[test]
fn describe_sees_a_clock_at_the_epoch() {
    let meta = describe(
        r#"export const meta = { name: "T" + new Date().toISOString().slice(0, 4), slug: "t", version: "1.0.0", description: "d" + (Math.random() < 1) };
        export default function () {}"#,
        &Limits::default(),
    )
    .expect("meta");
    assert_eq!(meta.name, "T1970");
}

#[test]
fn typescript_and_imports_are_told_what_to_do_at_their_line() {
    let err = failure(
        "interface Reply { text: string }\nexport default async function () { return 1; }",
        ScriptedHost::default(),
    );
    assert!(err.starts_with("graph.js:1:1: syntax error: "), "{err}");
    assert!(
        err.contains("this looks like TypeScript: a graph in TypeScript is a `.ts` file"),
        "{err}"
    );
    assert!(
        err.contains("\n  1 | interface Reply { text: string }\n    | ^"),
        "{err}"
    );
    let err = failure(
        "const a = 1;\n  import { x } from \"./other.js\";\nexport default async function () { return x; }",
        ScriptedHost::default(),
    );
    assert!(
        err.starts_with("graph.js:2:3: a graph cannot import modules"),
        "{err}"
    );
    assert!(err.contains("g.graph(\"slug\", args)"), "{err}");
    assert!(err.contains("\n  2 |   import { x }"), "{err}");
}
