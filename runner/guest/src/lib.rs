//! The guest component: the shared graph driver (`graph-js`, boa and the prelude) exporting the
//! `graph` world of `wit/graph.wit`, with every host function reached through the WIT imports.
//! Nothing else is reachable from a script: the component has no filesystem or socket imports,
//! and the host gives it an empty environment and no arguments.

use std::cell::RefCell;

use graph_js::{AgentRequest, Failure, FailureCode, Interpreter, Limits, Prepared, ScriptError};

wit_bindgen::generate!({
    path: "../../wit",
    world: "graph-guest",
});

use graphrelay::graph::host;

thread_local! {
    /// An interpreter with the prelude evaluated, from the pre-initialized generic component
    /// (`initialize("")`); the first `run` or `describe` of an instance takes it.
    static BLANK: RefCell<Option<Interpreter>> = const { RefCell::new(None) };
    /// The graph built in by `runner build` (pre-initialized memory); `run` takes it.
    static BUILT_IN: RefCell<Option<Prepared>> = const { RefCell::new(None) };
    /// Its `meta` as JSON, for `describe`.
    static BUILT_IN_META: RefCell<Option<String>> = const { RefCell::new(None) };
}

struct Component;

// The exports' `result<_, string>` is the WIT interface's: errors cross it as their sentences.
impl Guest for Component {
    fn describe(script: String) -> Result<String, String> {
        if script.is_empty() {
            return BUILT_IN_META
                .with(|meta| meta.borrow().clone())
                .ok_or_else(no_built_in);
        }
        let mut prepared = interpreter()
            .and_then(|blank| blank.prepare(&script))
            .map_err(|e| e.to_string())?;
        let meta = prepared.meta().map_err(|e| e.to_string())?;
        serde_json::to_string(&meta).map_err(|e| e.to_string())
    }

    fn run(script: String, args: String) -> Result<String, String> {
        let host = Box::new(WitHost);
        if script.is_empty() {
            let prepared = BUILT_IN
                .with(|built_in| built_in.borrow_mut().take())
                .ok_or_else(no_built_in)?;
            return prepared.run(&args, host).map_err(|e| e.to_string());
        }
        // Top-level code already reads the run's clock and random source.
        interpreter()
            .and_then(|blank| blank.prepare_hosted(&script, host))
            .and_then(|prepared| prepared.run_hosted(&args))
            .map_err(|e| e.to_string())
    }

    fn initialize(script: String) -> Result<(), String> {
        // The snapshot keeps the web platform functions compiled, so no run pays for that.
        let mut blank = Interpreter::new(&Limits::default()).map_err(|e| e.to_string())?;
        blank.load_web().map_err(|e| e.to_string())?;
        if script.is_empty() {
            BLANK.with(|b| *b.borrow_mut() = Some(blank));
            return Ok(());
        }
        let mut prepared = blank.prepare(&script).map_err(|e| e.to_string())?;
        let meta = prepared.meta().map_err(|e| e.to_string())?;
        let meta = serde_json::to_string(&meta).map_err(|e| e.to_string())?;
        BUILT_IN.with(|built_in| *built_in.borrow_mut() = Some(prepared));
        BUILT_IN_META.with(|m| *m.borrow_mut() = Some(meta));
        Ok(())
    }
}

/// The pre-initialized interpreter if this instance has one, else a fresh one.
fn interpreter() -> Result<Interpreter, ScriptError> {
    match BLANK.with(|b| b.borrow_mut().take()) {
        Some(blank) => Ok(blank),
        None => Interpreter::new(&Limits::default()),
    }
}

fn no_built_in() -> String {
    "this component has no graph built in: pass the script".to_owned()
}

export!(Component);

/// The `graph-js` host, answered by the WIT imports.
struct WitHost;

fn failure(f: host::Failure) -> Failure {
    match f {
        host::Failure::BudgetExhausted(m) => Failure::new(FailureCode::BudgetExhausted, m),
        host::Failure::Denied(m) => Failure::new(FailureCode::Denied, m),
        host::Failure::Cancelled(m) => Failure::new(FailureCode::Cancelled, m),
        host::Failure::NotFound(m) => Failure::new(FailureCode::NotFound, m),
        host::Failure::Invalid(m) => Failure::new(FailureCode::Invalid, m),
        host::Failure::Failed(m) => Failure::new(FailureCode::Failed, m),
    }
}

impl graph_js::Host for WitHost {
    fn start_agent(&mut self, request: AgentRequest) -> Result<u32, Failure> {
        host::start_agent(&host::AgentRequest {
            prompt: request.prompt,
            system: request.system,
            model: request.model,
            max_tokens: request.max_tokens,
            label: request.label,
            tools: request.tools,
            max_turns: request.max_turns,
        })
        .map_err(failure)
    }

    fn start_tool(&mut self, name: &str, args: &str) -> Result<u32, Failure> {
        host::start_tool(name, args).map_err(failure)
    }

    fn start_graph(&mut self, slug: &str, args: &str) -> Result<u32, Failure> {
        host::start_graph(slug, args).map_err(failure)
    }

    fn start_sleep(&mut self, ms: u32) -> Result<u32, Failure> {
        host::start_sleep(ms).map_err(failure)
    }

    fn wait_any(&mut self, handles: &[u32]) -> (u32, Result<String, Failure>) {
        let (handle, outcome) = host::wait_any(handles);
        (handle, outcome.map_err(failure))
    }

    fn tokens_used(&mut self) -> u64 {
        host::tokens_used()
    }

    fn token_cap(&mut self) -> Option<u64> {
        host::token_cap()
    }

    fn log(&mut self, message: &str) {
        host::log(message);
    }

    fn clock_now(&mut self) -> graph_js::ClockReading {
        let reading = host::clock_now();
        graph_js::ClockReading {
            wall_ms: reading.wall_ms,
            monotonic_ms: reading.monotonic_ms,
        }
    }

    fn random_bytes(&mut self, out: &mut [u8]) {
        // The host answers at most what was asked for; the rest stays zero.
        let bytes = host::random_bytes(u32::try_from(out.len()).unwrap_or(u32::MAX));
        let n = bytes.len().min(out.len());
        out[..n].copy_from_slice(&bytes[..n]);
    }
}
