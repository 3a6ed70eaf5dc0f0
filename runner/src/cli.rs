//! The command-line side of the library, behind the `cli` feature (which pulls in clap): the
//! agent-provider flags shared by `runner run`, `runner test` and `relay desktop run`, and the
//! clap value names of [`EngineKind`] and [`ProviderKind`]. The library's own types stay plain,
//! so an embedder built without `cli` gets no clap.

use std::path::PathBuf;
use std::sync::Arc;

use clap::builder::PossibleValue;

use crate::engine::EngineKind;
use crate::host::agents::AgentProvider;
use crate::host::provider_config::{ProviderConfigError, ProviderKind};
use crate::host::providers::ProviderOptions;

/// The log filter of the runner's binaries, in `tracing`'s `EnvFilter` syntax: `RUST_LOG`, as
/// everywhere else; `RUNNER_LOG` (its old name) when `RUST_LOG` is unset or empty; else `warn`.
pub fn log_filter(rust_log: Option<&str>, runner_log: Option<&str>) -> String {
    [rust_log, runner_log]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|filter| !filter.is_empty())
        .unwrap_or("warn")
        .to_owned()
}

/// The agent-provider flags shared by `runner run`, `runner test` and `relay desktop run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProviderArgs {
    /// A real agent provider: `openai` (any OpenAI-compatible server: OpenAI, llama.cpp,
    /// Ollama, vLLM, LM Studio) or `anthropic`.
    #[arg(long, value_enum, requires = "model")]
    pub provider: Option<ProviderKind>,
    /// The provider's base URL, with its version path (default: the hosted API,
    /// `https://api.openai.com/v1` or `https://api.anthropic.com/v1`).
    #[arg(long = "base-url", value_name = "URL", requires = "provider")]
    pub base_url: Option<String>,
    /// The model for agents that name none.
    #[arg(long, value_name = "NAME", requires = "provider")]
    pub model: Option<String>,
    /// The environment variable that holds the API key (default: OPENAI_API_KEY for the hosted
    /// OpenAI API, ANTHROPIC_API_KEY for anthropic; none for other OpenAI-compatible servers).
    #[arg(long = "api-key-env", value_name = "VAR", requires = "provider")]
    pub api_key_env: Option<String>,
    /// Sampling temperature (0 makes replies repeatable).
    #[arg(long, requires = "provider")]
    pub temperature: Option<f64>,
    /// USD per million input tokens of the model, for `reported_cost`.
    #[arg(long = "input-price", value_name = "USD", requires = "provider")]
    pub input_price: Option<f64>,
    /// USD per million output tokens of the model, for `reported_cost`.
    #[arg(long = "output-price", value_name = "USD", requires = "provider")]
    pub output_price: Option<f64>,
    /// Seconds one provider request may take.
    #[arg(long = "request-timeout", value_name = "SECS", requires = "provider")]
    pub request_timeout: Option<f64>,
    /// A providers file (TOML) naming several providers; a graph picks one with
    /// `model: "NAME:MODEL"` (see docs/graphs.md).
    #[arg(long, value_name = "FILE")]
    pub providers: Option<PathBuf>,
}

impl ProviderArgs {
    /// The plain options these flags say.
    pub fn options(&self) -> ProviderOptions {
        ProviderOptions {
            provider: self.provider,
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key_env: self.api_key_env.clone(),
            temperature: self.temperature,
            input_price: self.input_price,
            output_price: self.output_price,
            request_timeout: self.request_timeout,
            providers: self.providers.clone(),
        }
    }

    /// The provider these flags describe, or `None` when they name none (see
    /// [`ProviderOptions::build`]).
    pub fn build(&self) -> Result<Option<Arc<dyn AgentProvider>>, ProviderConfigError> {
        self.options().build()
    }
}

impl clap::ValueEnum for EngineKind {
    fn value_variants<'a>() -> &'a [Self] {
        &[EngineKind::Wasm, EngineKind::Boa]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            EngineKind::Wasm => PossibleValue::new("wasm").help(
                "boa compiled to a wasm component under wasmtime: the sandbox for untrusted graphs",
            ),
            EngineKind::Boa => PossibleValue::new("boa")
                .help("boa in-process: fast to start, for trusted graphs (see docs/limits.md)"),
        })
    }
}

impl clap::ValueEnum for ProviderKind {
    fn value_variants<'a>() -> &'a [Self] {
        &[ProviderKind::OpenAi, ProviderKind::Anthropic]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            ProviderKind::OpenAi => PossibleValue::new(self.as_str())
                .help("OpenAI's chat completions (OpenAI, llama.cpp, Ollama, vLLM, LM Studio)"),
            ProviderKind::Anthropic => {
                PossibleValue::new(self.as_str()).help("Anthropic's Messages API")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn value_names_are_the_serde_names() {
        for kind in EngineKind::value_variants() {
            let name = kind.to_possible_value().map(|v| v.get_name().to_owned());
            let serde = serde_json::to_value(kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned));
            assert_eq!(name, serde);
        }
        for kind in ProviderKind::value_variants() {
            let name = kind.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(kind.as_str()));
        }
    }

    #[test]
    fn rust_log_wins_and_runner_log_is_its_alias() {
        assert_eq!(log_filter(Some("debug"), Some("trace")), "debug");
        assert_eq!(log_filter(None, Some("trace")), "trace");
        assert_eq!(log_filter(Some(" "), Some("trace")), "trace");
        assert_eq!(log_filter(None, None), "warn");
    }
}
