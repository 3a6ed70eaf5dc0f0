//! The runner's flags that another binary shares: the agent-provider flags of `runner run`,
//! `runner test` and `relay desktop run`, and the clap value names of `EngineKind` and
//! `ProviderKind`. One source compiled into both binaries (the `relay` binary includes this
//! file with `#[path]`), so clap stays out of every library; the library keeps the plain
//! options (`runner::host::providers::ProviderOptions`) these flags become.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use runner::engine::EngineKind;
use runner::host::agents::AgentProvider;
use runner::host::provider_config::{ProviderConfigError, ProviderKind};
use runner::host::providers::ProviderOptions;

/// The agent-provider flags shared by `runner run`, `runner test` and `relay desktop run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProviderArgs {
    /// A real agent provider: `openai` (any OpenAI-compatible server: OpenAI, llama.cpp,
    /// Ollama, vLLM, LM Studio) or `anthropic`.
    #[arg(long, value_parser = PROVIDERS, requires = "model")]
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

/// A clap value parser over a fixed table of values, each with its name and help: what
/// `clap::ValueEnum` gives, for the library's plain enums (the orphan rule would keep that
/// impl in the library, and with it clap).
#[derive(Clone, Copy)]
pub struct Choices<T: 'static>(&'static [(T, &'static str, &'static str)]);

impl<T> Choices<T> {
    fn possible(&self) -> impl Iterator<Item = PossibleValue> + '_ {
        self.0
            .iter()
            .map(|(_, name, help)| PossibleValue::new(*name).help(*help))
    }
}

impl<T: Copy + Send + Sync + 'static> TypedValueParser for Choices<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        // clap's own parser says what is wrong with a value that is none of the names.
        let name = PossibleValuesParser::new(self.possible()).parse_ref(cmd, arg, value)?;
        self.0
            .iter()
            .find(|(_, known, _)| *known == name)
            .map(|(value, _, _)| *value)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.possible()))
    }
}

/// `--engine`'s values.
pub const ENGINES: Choices<EngineKind> = Choices(&[
    (
        EngineKind::Wasm,
        "wasm",
        "boa compiled to a wasm component under wasmtime: the sandbox for untrusted graphs",
    ),
    (
        EngineKind::Boa,
        "boa",
        "boa in-process: fast to start, for trusted graphs (see docs/limits.md)",
    ),
]);

/// `--provider`'s values.
pub const PROVIDERS: Choices<ProviderKind> = Choices(&[
    (
        ProviderKind::OpenAi,
        "openai",
        "OpenAI's chat completions (OpenAI, llama.cpp, Ollama, vLLM, LM Studio)",
    ),
    (
        ProviderKind::Anthropic,
        "anthropic",
        "Anthropic's Messages API",
    ),
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_names_are_the_library_names() {
        for (kind, name, _) in ENGINES.0 {
            assert_eq!(kind.to_string(), *name);
            let serde = serde_json::to_value(kind).expect("serializes");
            assert_eq!(serde.as_str(), Some(*name));
        }
        for (kind, name, _) in PROVIDERS.0 {
            assert_eq!(kind.as_str(), *name);
        }
        // No wildcard: a new kind fails to compile here until it has a name above.
        for kind in [EngineKind::Wasm, EngineKind::Boa] {
            match kind {
                EngineKind::Wasm | EngineKind::Boa => {
                    assert!(ENGINES.0.iter().any(|(named, _, _)| *named == kind));
                }
            }
        }
        for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
            match kind {
                ProviderKind::OpenAi | ProviderKind::Anthropic => {
                    assert!(PROVIDERS.0.iter().any(|(named, _, _)| *named == kind));
                }
            }
        }
    }
}
