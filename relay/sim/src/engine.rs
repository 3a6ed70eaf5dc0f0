//! The graph engine stand-in: instead of interpreting a script, it starts the one agent the
//! seed's graphs are modelled as, whose latency is the run time drawn for that run, in virtual
//! time. It goes through the real host (`Invocation`), so the budget, the trace, cancellation
//! and the relay's handling of outcomes are the product's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use graph_js::{AgentRequest, FailureCode, Meta, MetaError};
use runner::engine::{Engine, EngineError};
use runner::host::Invocation;
use runner::host::agents::{AgentProvider, ProgressFn, ProviderError, Turn, TurnRequest, Usage};
use runner::host::approvals::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// How long the seed's engine took to stop a cancelled run. The seed's running-cancel figures
/// (mean 2.0 s, p95 3.3 s, max 3.5 s) are the 3 s control poll plus this.
pub const ENGINE_STOP: Duration = Duration::from_millis(500);
/// Tokens each simulated run meters.
pub const SIM_TOKENS: u64 = 100;

/// The stand-in engine.
#[derive(Default)]
pub struct SimEngine {
    executions: AtomicU64,
}

impl SimEngine {
    /// The script stored for the stand-in session (never interpreted).
    pub const SCRIPT: &'static str = "export const meta = {name: \"Simulated graph\", slug: \"sim\", version: \"1.0.0\"};\nexport default async function (args, g) { return g.agent({prompt: \"sim\"}); }\n";

    /// Runs executed so far.
    pub fn executions(&self) -> u64 {
        self.executions.load(Ordering::SeqCst)
    }
}

impl Engine for SimEngine {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn run(
        &self,
        _script: Arc<str>,
        args: String,
        mut invocation: Invocation,
    ) -> BoxFuture<'static, Result<String, EngineError>> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let args: Value =
                serde_json::from_str(&args).map_err(|e| EngineError::Graph(e.to_string()))?;
            let millis = args["duration_ms"].as_u64().unwrap_or(0);
            let handle = invocation
                .start_agent(AgentRequest {
                    prompt: "simulated work".into(),
                    system: None,
                    model: None,
                    max_tokens: None,
                    label: Some(format!("sim:{millis}")),
                    tools: Vec::new(),
                    max_turns: None,
                })
                .map_err(|e| EngineError::Graph(e.to_string()))?;
            let (_, reply) = invocation.wait_any(&[handle]).await;
            match reply {
                Ok(_) => {
                    // A result of `result_count` copies of `result_unit`, for result bounding
                    // (too large to travel in the run's arguments).
                    let result = match (args["result_unit"].as_str(), args["result_count"].as_u64())
                    {
                        (Some(unit), Some(count)) => {
                            Value::String(unit.repeat(usize::try_from(count).unwrap_or(0)))
                        }
                        _ => serde_json::json!({"ok": true}),
                    };
                    Ok(result.to_string())
                }
                Err(failure) if failure.code == FailureCode::Cancelled => {
                    tokio::time::sleep(ENGINE_STOP).await;
                    Err(EngineError::Graph(failure.to_string()))
                }
                Err(failure) => Err(EngineError::Graph(failure.to_string())),
            }
        })
    }

    fn describe(&self, _script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>> {
        Box::pin(async {
            Ok(Meta {
                name: "Simulated graph".into(),
                slug: "sim".into(),
                version: "1.0.0".into(),
                description: String::new(),
                args: None,
            })
        })
    }
}

/// The stand-in's agent: it answers after the virtual time its label names (`sim:<ms>`).
pub struct SimProvider;

impl AgentProvider for SimProvider {
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        _progress: ProgressFn<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(async move {
            let millis = request
                .label
                .as_deref()
                .and_then(|l| l.strip_prefix("sim:"))
                .and_then(|m| m.parse::<u64>().ok())
                .unwrap_or(0);
            tokio::select! {
                // A turn whose time is up as the cancel comes has answered: not a random pick.
                biased;
                () = tokio::time::sleep(Duration::from_millis(millis)) => Ok(Turn {
                    text: "done".into(),
                    tool_calls: Vec::new(),
                    usage: Usage { input_tokens: SIM_TOKENS / 2, output_tokens: SIM_TOKENS / 2 },
                    cost: 0.0,
                    model: "sim".into(),
                    finish_reason: "stop".into(),
                }),
                () = cancel.cancelled() => Err(ProviderError::new(FailureCode::Cancelled, "cancelled")),
            }
        })
    }
}
