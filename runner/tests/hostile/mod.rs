//! The hostile-script suite's catalog and its two ways of running a script.
//!
//! Every [`Case`] is one hostile script with what the wasm sandbox must do with it (the
//! guarantee) and what the in-process boa engine was observed to do with it. The
//! `sandbox_*.rs` files each run the cases of one guarantee:
//!
//! - in the **wasm engine** through [`runner::run_graph`] in the test process: the run must end
//!   as expected, with an error naming the limit, within a generous bound, and the next run in
//!   the same engine and process must work;
//! - in the **wasm engine** through `runner run --engine wasm` in a child process (the way a
//!   person or the desktop's tests start it), with the same expectation;
//! - in the **boa engine** through `runner run --engine boa` in a child process, because a
//!   script boa cannot contain takes the whole process down; how it ended is asserted too, so
//!   the table in docs/limits.md (generated from [`CASES`], checked by `sandbox_table.rs`)
//!   stays what was observed.
#![allow(dead_code)]

pub mod child;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use runner::engine::Engine;
use runner::engine::wasm::{WasmEngine, WasmLimits};
use runner::host::events::{CollectingSink, Event};
use runner::host::mock::MockProvider;
use runner::run::{RunOptions, RunOutcome, RunRequest, run_graph};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use child::{BOA_CHILD_ADDRESS_SPACE_KIB, ChildEnd, ChildRun, run_child};

/// The deadline hostile runs get unless a case says otherwise. Those cases end at another
/// limit long before it (boa's loop limit takes about a second in the sandbox, more on a busy
/// machine); the deadline only keeps a broken limit from hanging the suite.
pub const DEFAULT_TIMEOUT_SECS: f64 = 20.0;

/// On top of a run's own deadline, how long a test waits before it calls the run stuck. Only
/// an upper bound that cannot flake: a contained run ends long before it.
pub const GRACE: Duration = Duration::from_secs(10);

/// What the wasm sandbox must do with a script.
#[derive(Debug, Clone, Copy)]
pub enum Wasm {
    /// End `failed` with an error containing this text (the name of the limit).
    Fails(&'static str),
    /// Complete with exactly this result (JSON text).
    Completes(&'static str),
}

/// What the in-process boa engine was observed to do with a script (in a child process).
#[derive(Debug, Clone, Copy)]
pub enum Boa {
    /// Contained: ended `failed` with an error containing this text.
    Fails(&'static str),
    /// Completed with exactly this result (JSON text).
    Completes(&'static str),
    /// Reported `failed` at the wall-clock deadline, but only because `run_graph` stops
    /// waiting: the interpreter thread cannot be interrupted and runs on until the process
    /// exits (the CLI exits right after printing; a long-lived host keeps burning a core).
    DeadlineOnly,
    /// Took the whole process down (a failed allocation aborts, a native stack overflow
    /// kills it). The text is in the last words on stderr.
    Aborts(&'static str),
}

/// Which guarantee a case tests; one `sandbox_*.rs` file each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    /// `sandbox_cpu.rs`: loops, runaway built-ins, deadline and fuel.
    Cpu,
    /// `sandbox_memory.rs`: the linear-memory cap.
    Memory,
    /// `sandbox_recursion.rs`: recursion, nesting and the stack caps.
    Recursion,
    /// `sandbox_capabilities.rs`: nothing outside the WIT world.
    Capabilities,
    /// `sandbox_tampering.rs`: approvals and the budget hold whatever JS does.
    Tampering,
    /// `sandbox_output.rs`: logs, results and errors are bounded.
    Output,
}

/// One hostile script.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// Short id, used by the tests and in the table.
    pub id: &'static str,
    /// The guarantee it attacks.
    pub guarantee: Guarantee,
    /// What it does, for the table.
    pub class: &'static str,
    /// The module text.
    pub script: &'static str,
    /// Extra `runner run` flags for the wasm runs (limits), also applied to the library run.
    pub wasm_flags: &'static [&'static str],
    /// The run's deadline in seconds.
    pub timeout_secs: f64,
    /// The run's token cap (`--max-tokens`), if any.
    pub max_tokens: Option<u64>,
    /// The sandbox's guarantee.
    pub wasm: Wasm,
    /// What boa in-process did.
    pub boa: Boa,
    /// Whether only the sandbox enforces the limit that stops it, though boa happened to
    /// contain it here (a flag boa does not have, or an allocator that refused only because
    /// the child ran under an address-space limit). Aborts and deadline-only are implied.
    pub marked_wasm_only: bool,
}

impl Case {
    const fn new(
        id: &'static str,
        guarantee: Guarantee,
        class: &'static str,
        script: &'static str,
        wasm: Wasm,
        boa: Boa,
    ) -> Self {
        Self {
            id,
            guarantee,
            class,
            script,
            wasm_flags: &[],
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            max_tokens: None,
            wasm,
            boa,
            marked_wasm_only: false,
        }
    }

    const fn wasm_only(mut self) -> Self {
        self.marked_wasm_only = true;
        self
    }

    /// Whether the sandbox enforces a limit here that boa in-process does not.
    pub fn only_wasm_contains(&self) -> bool {
        self.marked_wasm_only || matches!(self.boa, Boa::Aborts(_) | Boa::DeadlineOnly)
    }

    const fn flags(mut self, flags: &'static [&'static str]) -> Self {
        self.wasm_flags = flags;
        self
    }

    const fn timeout(mut self, secs: f64) -> Self {
        self.timeout_secs = secs;
        self
    }

    const fn max_tokens(mut self, cap: u64) -> Self {
        self.max_tokens = Some(cap);
        self
    }

    /// The wasm limits the case's flags ask for.
    pub fn limits(&self) -> WasmLimits {
        let mut limits = WasmLimits::default();
        let mut flags = self.wasm_flags.iter();
        while let Some(flag) = flags.next() {
            let value: u64 = flags
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{}: flag {flag} needs a number", self.id));
            match *flag {
                "--fuel" => limits.fuel = Some(value),
                "--memory-mib" => limits.memory_bytes = value * 1024 * 1024,
                "--wasm-stack-kib" => {
                    limits.wasm_stack_bytes = usize::try_from(value * 1024).expect("fits")
                }
                other => panic!("{}: unknown flag {other}", self.id),
            }
        }
        limits
    }
}

use Guarantee::*;

/// Long scripts are built at first use (a parser bomb is 200 KB of brackets).
/// A meta is added at the end (every run checks it; no line of the script moves).
pub fn script_of(case: &Case) -> String {
    match case.script {
        "<parser-nesting>" => crate::common::with_meta(&format!(
            "export default () => {}{};",
            "[".repeat(100_000),
            "]".repeat(100_000)
        )),
        script => crate::common::with_meta(script),
    }
}

/// How long cases that only a deadline stops may run: short, so the suite stays fast.
const SPIN_SECS: f64 = 2.0;

/// Every hostile script, grouped by guarantee.
pub const CASES: &[Case] = &[
    // ---- CPU: loops, runaway built-ins, the deadline and fuel ----
    Case::new(
        "loop-plain",
        Cpu,
        "`while (true) {}`",
        "export default function () { while (true) {} }",
        Wasm::Fails("loop iteration limit exceeded"),
        Boa::Fails("loop iteration limit exceeded"),
    ),
    Case::new(
        "loop-in-getter",
        Cpu,
        "endless loop in a getter",
        "export default function () { return ({ get x() { for (;;) {} } }).x; }",
        Wasm::Fails("loop iteration limit exceeded"),
        Boa::Fails("loop iteration limit exceeded"),
    ),
    Case::new(
        "loop-in-promise-job",
        Cpu,
        "endless loop in a promise reaction",
        "export default function () { return Promise.resolve().then(() => { while (true) {} }); }",
        Wasm::Fails("loop iteration limit exceeded"),
        Boa::Fails("loop iteration limit exceeded"),
    ),
    Case::new(
        "endless-promise-chain",
        Cpu,
        "endless promise chain",
        "function f() { return Promise.resolve().then(f); } export default function () { return f(); }",
        Wasm::Fails("wall-clock deadline exceeded"),
        Boa::Fails("wall-clock deadline exceeded"),
    )
    .timeout(SPIN_SECS),
    Case::new(
        "endless-await-loop",
        Cpu,
        "`for (;;) await null`",
        "export default async function () { for (;;) { await null; } }",
        Wasm::Fails("wall-clock deadline exceeded"),
        Boa::Fails("wall-clock deadline exceeded"),
    )
    .timeout(SPIN_SECS),
    Case::new(
        "many-short-loops",
        Cpu,
        "short loops in a called function (resets boa's per-call loop counter)",
        "function spin() { for (let i = 0; i < 1000; i++) {} } export default function () { for (;;) spin(); }",
        Wasm::Fails("wall-clock deadline exceeded"),
        Boa::DeadlineOnly,
    )
    .timeout(SPIN_SECS),
    Case::new(
        "catastrophic-regex",
        Cpu,
        "catastrophic regex backtracking (one built-in call)",
        r#"export default function () { return /^(a+)+$/.test("a".repeat(40) + "!"); }"#,
        Wasm::Fails("wall-clock deadline exceeded"),
        Boa::DeadlineOnly,
    )
    .timeout(SPIN_SECS),
    Case::new(
        "runaway-sort",
        Cpu,
        "huge sorts with a script comparator",
        "export default function () { const a = Array.from({ length: 200000 }, (_, i) => (i * 7919) % 200000); for (let k = 0; k < 1000; k++) a.sort((x, y) => (x ^ k) - (y ^ k)); return a[0]; }",
        Wasm::Fails("wall-clock deadline exceeded"),
        Boa::DeadlineOnly,
    )
    .timeout(SPIN_SECS),
    Case::new(
        "top-level-spin",
        Cpu,
        "short loops at module top level",
        "function spin() { for (let i = 0; i < 1000; i++) {} } for (;;) spin(); export default () => 1;",
        Wasm::Fails("wall-clock deadline exceeded"),
        Boa::DeadlineOnly,
    )
    .timeout(SPIN_SECS),
    Case::new(
        "fuel",
        Cpu,
        "`while (true) {}` with `--fuel 200000000`",
        "export default function () { while (true) {} }",
        Wasm::Fails("instruction budget exhausted"),
        Boa::Fails("loop iteration limit exceeded"),
    )
    .wasm_only()
    .flags(&["--fuel", "200000000"]),
    // ---- Memory: the linear-memory cap ----
    Case::new(
        "string-doubling",
        Memory,
        "`s = s + s` in a loop",
        r#"export default function () { let s = "x"; for (;;) s = s + s; }"#,
        Wasm::Fails("memory limit exceeded"),
        Boa::Aborts("memory allocation of"),
    ),
    Case::new(
        "array-growth",
        Memory,
        "an array of ever more 1 MB strings",
        r#"export default function () { const s = "x".repeat(1 << 20); const a = []; for (let i = 0; ; i++) a.push(s + i); }"#,
        Wasm::Fails("memory limit exceeded"),
        Boa::Aborts("memory allocation of"),
    ),
    Case::new(
        "typed-arrays",
        Memory,
        "ever more 64 MiB typed arrays",
        "export default function () { const a = []; for (;;) a.push(new Uint8Array(64 << 20)); }",
        Wasm::Fails("memory limit exceeded"),
        Boa::Fails("RangeError: invalid layout"),
    )
    .wasm_only(),
    Case::new(
        "huge-repeat",
        Memory,
        "one huge `repeat` (`\"x\".repeat(2 ** 28)`)",
        r#"export default function () { return "x".repeat(2 ** 28).length; }"#,
        Wasm::Fails("memory limit exceeded"),
        Boa::Aborts("memory allocation of"),
    ),
    Case::new(
        "huge-typed-array",
        Memory,
        "one 2 GiB typed array",
        "export default function () { return new Uint8Array(2 ** 31).length; }",
        Wasm::Fails("exceeds the maximum buffer size"),
        Boa::Fails("exceeds the maximum buffer size"),
    ),
    Case::new(
        "top-level-memory-bomb",
        Memory,
        "`s = s + s` at module top level",
        r#"let s = "x"; for (;;) s = s + s; export default () => 1;"#,
        Wasm::Fails("memory limit exceeded"),
        Boa::Aborts("memory allocation of"),
    ),
    Case::new(
        "memory-cap-flag",
        Memory,
        "`s = s + s` with `--memory-mib 32`",
        r#"export default function () { let s = "x"; for (;;) s = s + s; }"#,
        Wasm::Fails("more than 32 MiB"),
        Boa::Aborts("memory allocation of"),
    )
    .flags(&["--memory-mib", "32"]),
    // ---- Recursion: interpreter limits and the stack caps ----
    Case::new(
        "js-recursion",
        Recursion,
        "unbounded JS recursion",
        "function f(n) { return f(n + 1) + 1; } export default () => f(0);",
        Wasm::Fails("recursion limit exceeded"),
        Boa::Fails("recursion limit exceeded"),
    ),
    Case::new(
        "proxy-recursion",
        Recursion,
        "recursion through a Proxy trap",
        "const p = new Proxy({}, { get: (t, k, r) => r[k] }); export default () => p.x;",
        Wasm::Fails("recursion limit exceeded"),
        Boa::Fails("recursion limit exceeded"),
    ),
    Case::new(
        "parser-nesting",
        Recursion,
        "100,000 nested `[` (parser recursion)",
        "<parser-nesting>",
        Wasm::Fails("ran out of stack"),
        Boa::Aborts("overflowed its stack"),
    ),
    Case::new(
        "json-parse-deep",
        Recursion,
        "`JSON.parse` of 1,000,000 nested arrays",
        r#"export default function () { return JSON.parse("[".repeat(1000000) + "]".repeat(1000000)); }"#,
        Wasm::Fails("recursion limit exceeded"),
        Boa::Fails("recursion limit exceeded"),
    ),
    Case::new(
        "json-stringify-deep",
        Recursion,
        "`JSON.stringify` of 1,000,000 nested arrays",
        "export default function () { let a = []; for (let i = 0; i < 1000000; i++) a = [a]; return JSON.stringify(a).length; }",
        Wasm::Fails("ran out of stack"),
        Boa::Aborts("overflowed its stack"),
    ),
    Case::new(
        "to-string-deep",
        Recursion,
        "`String()` of 1,000,000 nested arrays",
        "export default function () { let a = []; for (let i = 0; i < 1000000; i++) a = [a]; return String(a).length; }",
        // Which of the two stacks runs out first depends on the guest's frame sizes (opt-level 3
        // inlines more): here the wasm stack cap, before the guest's shadow stack.
        Wasm::Fails("wasm stack limit exceeded"),
        Boa::Aborts("overflowed its stack"),
    ),
    Case::new(
        "wasm-stack-flag",
        Recursion,
        "getter recursion with `--wasm-stack-kib 256`",
        "const o = { get x() { return this.x; } }; export default function () { return o.x; }",
        Wasm::Fails("wasm stack limit exceeded"),
        Boa::Fails("recursion limit exceeded"),
    )
    .wasm_only()
    .flags(&["--wasm-stack-kib", "256"]),
    // ---- Capabilities: nothing outside the WIT world ----
    Case::new(
        "require",
        Capabilities,
        "`require(\"fs\")`",
        r#"export default function () { return require("fs"); }"#,
        Wasm::Fails("ReferenceError: require is not defined"),
        Boa::Fails("ReferenceError: require is not defined"),
    ),
    Case::new(
        "dynamic-import",
        Capabilities,
        "`await import(\"fs\")`",
        r#"export default async function () { return await import("fs"); }"#,
        Wasm::Fails("module resolution is disabled"),
        Boa::Fails("module resolution is disabled"),
    ),
    Case::new(
        "static-import",
        Capabilities,
        "`import fs from \"fs\"`",
        r#"import fs from "fs"; export default function () { return typeof fs; }"#,
        Wasm::Fails("a graph cannot import modules"),
        Boa::Fails("a graph cannot import modules"),
    ),
    Case::new(
        "process",
        Capabilities,
        "`process.env`",
        "export default function () { return process.env.HOME; }",
        Wasm::Fails("ReferenceError: process is not defined"),
        Boa::Fails("ReferenceError: process is not defined"),
    ),
    Case::new(
        "deno",
        Capabilities,
        "`Deno.readTextFileSync`",
        r#"export default function () { return Deno.readTextFileSync("/etc/passwd"); }"#,
        Wasm::Fails("ReferenceError: Deno is not defined"),
        Boa::Fails("ReferenceError: Deno is not defined"),
    ),
    Case::new(
        "fetch",
        Capabilities,
        "`fetch(url)`",
        r#"export default async function () { return (await fetch("http://127.0.0.1/")).status; }"#,
        Wasm::Fails("ReferenceError: fetch is not defined"),
        Boa::Fails("ReferenceError: fetch is not defined"),
    ),
    Case::new(
        "webassembly",
        Capabilities,
        "`WebAssembly.compile`",
        "export default function () { return WebAssembly.compile(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0])); }",
        Wasm::Fails("ReferenceError: WebAssembly is not defined"),
        Boa::Fails("ReferenceError: WebAssembly is not defined"),
    ),
    Case::new(
        "globals",
        Capabilities,
        "`globalThis` probing: every own key beyond the ECMAScript globals",
        r#"const STANDARD = ["AggregateError", "Array", "ArrayBuffer", "Atomics", "BigInt", "BigInt64Array", "BigUint64Array", "Boolean", "DataView", "Date", "Error", "EvalError", "FinalizationRegistry", "Float32Array", "Float64Array", "Function", "Infinity", "Int16Array", "Int32Array", "Int8Array", "Iterator", "JSON", "Map", "Math", "NaN", "Number", "Object", "Promise", "Proxy", "RangeError", "ReferenceError", "Reflect", "RegExp", "Set", "SharedArrayBuffer", "String", "Symbol", "SyntaxError", "TypeError", "URIError", "Uint16Array", "Uint32Array", "Uint8Array", "Uint8ClampedArray", "WeakMap", "WeakRef", "WeakSet", "decodeURI", "decodeURIComponent", "encodeURI", "encodeURIComponent", "eval", "globalThis", "isFinite", "isNaN", "parseFloat", "parseInt", "undefined"];
export default function () {
  const own = Reflect.ownKeys(globalThis).map(String).filter((k) => !STANDARD.includes(k));
  const inherited = [];
  for (let o = Object.getPrototypeOf(globalThis); o !== null; o = Object.getPrototypeOf(o)) {
    inherited.push(...Reflect.ownKeys(o).map(String).filter((k) => /host|start|native|settle|wasi|env|process/i.test(k)));
  }
  return { own: own.sort(), inherited };
}"#,
        Wasm::Completes(r#"{"own": ["DOMException", "TextDecoder", "TextEncoder", "TypedArray", "URL", "URLSearchParams", "atob", "btoa", "clearInterval", "clearTimeout", "console", "crypto", "performance", "queueMicrotask", "setInterval", "setTimeout", "structuredClone"], "inherited": []}"#),
        Boa::Completes(r#"{"own": ["DOMException", "TextDecoder", "TextEncoder", "TypedArray", "URL", "URLSearchParams", "atob", "btoa", "clearInterval", "clearTimeout", "console", "crypto", "performance", "queueMicrotask", "setInterval", "setTimeout", "structuredClone"], "inherited": []}"#),
    ),
    Case::new(
        "eval-escape",
        Capabilities,
        "`eval` / `Function` to reach another scope",
        r#"export default function () { return { direct: eval("typeof require"), indirect: (0, eval)("typeof process"), fn: Function("return typeof fetch")(), sameGlobal: Function("return this")() === globalThis }; }"#,
        Wasm::Completes(r#"{"direct": "undefined", "indirect": "undefined", "fn": "undefined", "sameGlobal": true}"#),
        Boa::Completes(r#"{"direct": "undefined", "indirect": "undefined", "fn": "undefined", "sameGlobal": true}"#),
    ),
    Case::new(
        "atomics-wait",
        Capabilities,
        "`Atomics.wait` to block the thread",
        "export default function () { return Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1e9); }",
        Wasm::Fails("agent cannot be suspended"),
        Boa::Fails("agent cannot be suspended"),
    ),
    Case::new(
        "date-and-random",
        Capabilities,
        "`Date.now()` and `Math.random()` (allowed)",
        "export default function () { const r = Math.random(); return { now: Date.now() > 1.7e12, random: r >= 0 && r < 1 }; }",
        Wasm::Completes(r#"{"now": true, "random": true}"#),
        Boa::Completes(r#"{"now": true, "random": true}"#),
    ),
    // ---- Tampering: approvals and the budget hold whatever the script patches ----
    Case::new(
        "tamper-approvals",
        Tampering,
        "patching `g`, built-ins and prototypes to skip an approval",
        r#"export default async function (args, g) {
  const seen = [];
  try { g.tool = async () => ({ bytes: 1 }); seen.push("replaced"); } catch (e) { seen.push("frozen"); }
  try { Object.defineProperty(g, "tool", { value: async () => ({ bytes: 1 }) }); seen.push("redefined"); } catch (e) { seen.push("frozen"); }
  JSON.parse = () => ({ bytes: 999 });
  Array.prototype.includes = () => false;
  Object.prototype.startTool = () => 1;
  Promise.reject = () => Promise.resolve({ bytes: 999 });
  try {
    await g.retry(() => g.tool("fs.write", { path: "pwned.txt", text: "x" }), { attempts: 2 });
    seen.push("written");
  } catch (e) { seen.push(e.code); }
  return seen;
}"#,
        Wasm::Completes(r#"["frozen", "frozen", "denied"]"#),
        Boa::Completes(r#"["frozen", "frozen", "denied"]"#),
    ),
    Case::new(
        "tamper-budget",
        Tampering,
        "patching `g.budget`, `Number.isInteger` and forging `maxTokens` past `--max-tokens 50`",
        r#"export default async function (args, g) {
  Number.isInteger = () => true;
  let replaced;
  try { g.budget = () => ({ used: 0, cap: null }); replaced = "replaced"; } catch (e) { replaced = "frozen"; }
  const codes = [];
  for (let i = 0; i < 5; i++) {
    try { await g.agent({ prompt: "p" + i, maxTokens: 1e12 }); codes.push("ok"); } catch (e) { codes.push(e.code); }
  }
  return { replaced, codes, budget: g.budget() };
}"#,
        Wasm::Completes(r#"{"replaced": "frozen", "codes": ["ok", "ok", "budget_exhausted", "budget_exhausted", "budget_exhausted"], "budget": {"used": 51, "cap": 50}}"#),
        Boa::Completes(r#"{"replaced": "frozen", "codes": ["ok", "ok", "budget_exhausted", "budget_exhausted", "budget_exhausted"], "budget": {"used": 51, "cap": 50}}"#),
    )
    .max_tokens(50),
    Case::new(
        "tamper-rebuild-prelude",
        Tampering,
        "re-evaluating the prelude's functions from their source to reach the natives",
        r#"export default async function (args, g) {
  const out = {};
  for (const name of ["tool", "agent", "budget"]) {
    try {
      const f = (0, eval)("(" + g[name].toString() + ")");
      out[name] = "ran: " + JSON.stringify(await f("fs.write", { path: "x", text: "y" }));
    } catch (e) { out[name] = e.name + ": " + e.message; }
  }
  return out;
}"#,
        Wasm::Completes(r#"{"tool": "ReferenceError: rejected is not defined", "agent": "ReferenceError: rejected is not defined", "budget": "ReferenceError: host is not defined"}"#),
        Boa::Completes(r#"{"tool": "ReferenceError: rejected is not defined", "agent": "ReferenceError: rejected is not defined", "budget": "ReferenceError: host is not defined"}"#),
    ),
    // ---- Output: logs, results, errors and host operations are bounded ----
    Case::new(
        "log-flood",
        Output,
        "100,000 log lines",
        r#"export default async function (a, g) { for (let i = 0; i < 100000; i++) g.log("line " + i); return "done"; }"#,
        Wasm::Completes(r#""done""#),
        Boa::Completes(r#""done""#),
    ),
    Case::new(
        "log-line-9mb",
        Output,
        "one 9 MB log line",
        r#"export default async function (a, g) { g.log("x".repeat(9000000)); return "done"; }"#,
        Wasm::Completes(r#""done""#),
        Boa::Completes(r#""done""#),
    ),
    Case::new(
        "result-50mb",
        Output,
        "a 50 MB result",
        r#"export default function () { return Array.from({ length: 50 }, () => "x".repeat(1000000)); }"#,
        Wasm::Fails("memory limit exceeded"),
        Boa::Fails("result limit exceeded"),
    ),
    Case::new(
        "result-11mb",
        Output,
        "an 11 MB result",
        r#"export default function () { return Array.from({ length: 11 }, () => "x".repeat(1000000)); }"#,
        Wasm::Fails("result limit exceeded"),
        Boa::Fails("result limit exceeded"),
    ),
    Case::new(
        "thrown-huge-error",
        Output,
        "a thrown `Error` with a 9 MB message",
        r#"export default function () { throw new Error("x".repeat(9000000)); }"#,
        Wasm::Fails("Error: xxxxxxxx"),
        Boa::Fails("Error: xxxxxxxx"),
    ),
    Case::new(
        "thrown-huge-object",
        Output,
        "a thrown 9 MB object",
        r#"export default function () { throw { huge: "x".repeat(9000000) }; }"#,
        Wasm::Fails(r#"{"huge":"xxxxxxxx"#),
        Boa::Fails(r#"{"huge":"xxxxxxxx"#),
    ),
    Case::new(
        "result-deep",
        Output,
        "a result nested 1,000 deep",
        "export default function () { let a = []; for (let i = 0; i < 1000; i++) a = [a]; return a; }",
        Wasm::Fails("nested more than 100 levels"),
        Boa::Fails("nested more than 100 levels"),
    ),
    Case::new(
        "result-cyclic",
        Output,
        "a cyclic result",
        "export default function () { const a = {}; a.a = a; return a; }",
        Wasm::Fails("result.a: a cycle: this is result again"),
        Boa::Fails("result.a: a cycle: this is result again"),
    ),
    Case::new(
        "handle-flood",
        Output,
        "20,000 host operations started and never awaited",
        r#"export default async function (a, g) {
  const started = [];
  for (let i = 0; i < 20000; i++) started.push(g.sleep(600000).then(() => "slept", (e) => e.code));
  const late = await Promise.all(started.slice(10000));
  return late.filter((code) => code === "invalid").length;
}"#,
        Wasm::Completes("10000"),
        Boa::Completes("10000"),
    ),
];

/// The case with `id`.
pub fn case(id: &str) -> &'static Case {
    CASES
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no hostile case {id}"))
}

/// The mock provider every run gets, in-process and in the CLI: each agent reply is "ok" and
/// costs 30 tokens (clipped to what the cap leaves).
pub fn replies() -> Value {
    json!({"default": {"text": "ok", "tokens": 30}})
}

/// A script that must work after any hostile run: it starts an agent and returns its reply.
pub const SURVIVOR: &str =
    "export default async function (a, g) { g.log('alive'); return (await g.agent('hi')).text; }";

/// A run's outcome and trace.
pub struct Observed {
    /// The outcome.
    pub outcome: RunOutcome,
    /// The trace.
    pub events: Vec<Event>,
    /// How long `run_graph` took.
    pub elapsed: Duration,
}

/// Runs `script` in `engine` through `run_graph` with a mock provider, panicking if it is not
/// over within its deadline plus [`GRACE`].
pub async fn run_in(
    engine: Arc<dyn Engine>,
    script: &str,
    timeout_secs: f64,
    max_tokens: Option<u64>,
) -> Observed {
    let sink = Arc::new(CollectingSink::default());
    let mut options = RunOptions::new(engine);
    options.provider = Arc::new(MockProvider::from_json(replies()).expect("replies"));
    // The standard tools (with no folder), as `runner run` has them: a tool that exists is
    // what the approval policy is asked about.
    options.tools = runner::host::tools::ToolRegistry::standard(None).expect("tools");
    options.events = sink.clone();
    options.timeout = Duration::from_secs_f64(timeout_secs);
    options.token_cap = max_tokens;
    let started = runner::clock::Stopwatch::start();
    let run = run_graph(
        RunRequest {
            script: crate::common::with_meta(script).into(),
            args: json!({}),
            graph: "hostile.js".into(),
            run_id: None,
        },
        &options,
        CancellationToken::new(),
    );
    let bound = Duration::from_secs_f64(timeout_secs) + GRACE;
    let outcome = tokio::time::timeout(bound, run)
        .await
        .unwrap_or_else(|_| panic!("the run was not over within {bound:?}"));
    Observed {
        outcome,
        events: sink.events(),
        elapsed: started.elapsed(),
    }
}

/// The wasm engine with the case's limits.
pub fn wasm_engine(case: &Case) -> Arc<dyn Engine> {
    Arc::new(WasmEngine::new(case.limits()).expect("the sandbox starts"))
}

/// Asserts that `outcome` is what the sandbox promises for `case`.
pub fn assert_wasm_outcome(case: &Case, status: &str, error: Option<&str>, result: &Value) {
    match case.wasm {
        Wasm::Fails(needle) => {
            assert_eq!(status, "failed", "{}: {error:?} {result}", case.id);
            let error = error.unwrap_or_default();
            assert!(
                error.contains(needle),
                "{}: expected {needle:?} in the error, got {:?}",
                case.id,
                cut(error)
            );
        }
        Wasm::Completes(expected) => {
            assert_eq!(status, "completed", "{}: {error:?}", case.id);
            let expected: Value = serde_json::from_str(expected).expect("expected result is JSON");
            assert_eq!(result, &expected, "{}", case.id);
        }
    }
}

/// The first 300 characters of `text`, for assertion messages.
pub fn cut(text: &str) -> String {
    text.chars().take(300).collect()
}

/// The case in the wasm engine in this process, then the next run in the same engine.
pub async fn check_wasm_in_process(case: &Case) -> Observed {
    let engine = wasm_engine(case);
    let observed = run_in(
        engine.clone(),
        &script_of(case),
        case.timeout_secs,
        case.max_tokens,
    )
    .await;
    let outcome = &observed.outcome;
    assert_wasm_outcome(
        case,
        outcome.status.as_str(),
        outcome.error.as_deref(),
        outcome.result.as_ref().unwrap_or(&Value::Null),
    );
    assert_survives(engine).await;
    observed
}

/// The host survived: a plain graph runs to its end in the same engine and process.
pub async fn assert_survives(engine: Arc<dyn Engine>) {
    let next = run_in(engine, SURVIVOR, 30.0, None).await;
    assert_eq!(next.outcome.result, Some(json!("ok")), "{:?}", next.outcome);
}

/// Writes the case's script to a file in a fresh folder (so the graphs folder holds only it).
/// Writes the case's script to a file in a fresh folder (so the graphs folder holds only it),
/// with the replies file beside it.
fn script_file(case: &Case) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{}.js", case.id));
    std::fs::write(&path, script_of(case)).expect("script written");
    std::fs::write(dir.path().join("replies.json"), replies().to_string()).expect("replies");
    (dir, path)
}

/// How long a child may take beyond its deadlines before the test kills it: the child also
/// starts a process and loads the compiled sandbox from the disk cache.
pub const CHILD_GRACE: Duration = Duration::from_secs(20);

/// A child runs the script twice at most: once to read its `meta` for the catalog of nested
/// graphs (bounded by the run's deadline), once to run it.
fn child_deadline(case: &Case) -> Duration {
    2 * Duration::from_secs_f64(case.timeout_secs) + CHILD_GRACE
}

fn child_args(case: &Case, dir: &Path, engine: &str, wasm_flags: bool) -> Vec<String> {
    let mut args = vec![
        "--engine".to_owned(),
        engine.to_owned(),
        "--timeout".to_owned(),
        case.timeout_secs.to_string(),
        "--replies".to_owned(),
        dir.join("replies.json").display().to_string(),
    ];
    if let Some(cap) = case.max_tokens {
        args.extend(["--max-tokens".to_owned(), cap.to_string()]);
    }
    if wasm_flags {
        args.extend(case.wasm_flags.iter().map(|f| (*f).to_owned()));
    }
    args
}

/// The case through `runner run --engine wasm` in a child process.
pub fn check_wasm_cli(case: &Case) -> ChildRun {
    let (dir, path) = script_file(case);
    let kill_after = child_deadline(case);
    let args = child_args(case, dir.path(), "wasm", true);
    let run = run_child(&path, &args, None, kill_after);
    match &run.end {
        ChildEnd::Outcome {
            status,
            error,
            result,
        } => assert_wasm_outcome(case, status, error.as_deref(), result),
        other => panic!(
            "{}: runner run --engine wasm did not print an outcome: {}",
            case.id,
            cut(&other.describe())
        ),
    }
    run
}

/// The case through `runner run --engine boa` in a child process, asserting what was observed.
pub fn check_boa_child(case: &Case) -> ChildRun {
    let (dir, path) = script_file(case);
    let kill_after = child_deadline(case);
    let run = run_child(
        &path,
        &child_args(case, dir.path(), "boa", false),
        Some(BOA_CHILD_ADDRESS_SPACE_KIB),
        kill_after,
    );
    let seen = cut(&run.end.describe());
    match (case.boa, &run.end) {
        (
            Boa::Fails(needle),
            ChildEnd::Outcome {
                status,
                error: Some(error),
                ..
            },
        ) if status == "failed" && error.contains(needle) => {}
        (Boa::Completes(expected), ChildEnd::Outcome { status, result, .. })
            if status == "completed"
                && result == &serde_json::from_str::<Value>(expected).expect("JSON") => {}
        (
            Boa::DeadlineOnly,
            ChildEnd::Outcome {
                status,
                error: Some(error),
                ..
            },
        ) if status == "failed" && error.contains("wall-clock deadline") => {}
        (Boa::Aborts(needle), ChildEnd::Aborted { .. }) if run.stderr.contains(needle) => {}
        (expected, _) => panic!(
            "{}: boa in-process was recorded as {expected:?}, now: {seen}",
            case.id
        ),
    }
    run
}

/// What the three runs of a case observed.
pub struct Checked {
    /// The sandbox, in this process.
    pub wasm: Observed,
    /// The sandbox, through `runner run --engine wasm`.
    pub wasm_cli: ChildRun,
    /// boa in-process, through `runner run --engine boa`.
    pub boa: ChildRun,
}

/// All three runs of a case: the sandbox in-process and from the CLI, and boa from the CLI.
pub async fn check(id: &str) -> Checked {
    let case = case(id);
    let wasm = check_wasm_in_process(case).await;
    let case_for_children = *case;
    let (wasm_cli, boa) = tokio::task::spawn_blocking(move || {
        (
            check_wasm_cli(&case_for_children),
            check_boa_child(&case_for_children),
        )
    })
    .await
    .expect("child checks");
    Checked {
        wasm,
        wasm_cli,
        boa,
    }
}
