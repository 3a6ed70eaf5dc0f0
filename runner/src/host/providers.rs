//! Choosing a model: [`ProviderSet`], the provider a run uses, built from provider entries
//! (see [`provider_config`](super::provider_config)), a providers file or the command-line flags
//! for one. It reads the graph's `model: "entry:model"`, checks it and hands the turn to that
//! entry's wire dialect ([`openai`](super::openai) or [`anthropic`](super::anthropic)).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use graph_js::FailureCode;
use tokio_util::sync::CancellationToken;

use super::agents::{AgentProvider, ProgressFn, ProviderError, Turn, TurnRequest};
use super::anthropic::AnthropicProvider;
use super::approvals::BoxFuture;
use super::http::MAX_REQUEST_TIMEOUT;
use super::openai::OpenAiProvider;
use super::provider_config::{
    DefaultProblem, EntryProblem, MAX_PROVIDERS, MAX_PROVIDERS_FILE_BYTES, OPENAI_KEY_ENV, Price,
    ProviderConfig, ProviderConfigError, ProviderKind, check_name, invalid_file, parse_file,
};

/// The provider `config` describes, after checking it.
pub fn build(config: ProviderConfig) -> Result<Arc<dyn AgentProvider>, ProviderConfigError> {
    config
        .check()
        .map_err(|reason| ProviderConfigError::entry(&config.name, reason))?;
    Ok(match config.kind {
        ProviderKind::OpenAi => Arc::new(OpenAiProvider::new(config)?),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(config)?),
    })
}

/// The providers of a run, by entry name: what `--provider`, `--providers` and the desktop
/// relay's providers file build, and what resolves a graph's `model`.
#[derive(Default)]
pub struct ProviderSet {
    entries: BTreeMap<String, Arc<dyn AgentProvider>>,
    default: Option<String>,
}

impl std::fmt::Debug for ProviderSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSet")
            .field("entries", &self.entries.keys().collect::<Vec<_>>())
            .field("default", &self.default)
            .finish()
    }
}

impl ProviderSet {
    /// Reads a providers file.
    pub fn from_file(path: &Path) -> Result<Self, ProviderConfigError> {
        let shown = path.display().to_string();
        let read = |reason| ProviderConfigError::Read {
            path: shown.clone(),
            reason,
        };
        let text = crate::input::read_text_at_most(path, MAX_PROVIDERS_FILE_BYTES).map_err(read)?;
        Self::parse(&text).map_err(|reason| match reason {
            ProviderConfigError::File { reason, .. } => ProviderConfigError::File {
                path: shown,
                reason,
            },
            other => other,
        })
    }

    /// Parses the text of a providers file.
    pub fn parse(text: &str) -> Result<Self, ProviderConfigError> {
        let file = parse_file(text)?;
        let mut set = Self::default();
        for (name, entry) in file.entries {
            let config = entry
                .into_config(&name)
                .map_err(|reason| ProviderConfigError::entry(&name, reason))?;
            set.add(config)?;
        }
        if let Some(default) = file.default {
            set.set_default(&default).map_err(invalid_file)?;
        }
        Ok(set)
    }

    /// Adds an entry built from `config`.
    pub fn add(&mut self, config: ProviderConfig) -> Result<(), ProviderConfigError> {
        let name = config.name.clone();
        let provider = build(config)?;
        self.add_provider(&name, provider)
    }

    /// Adds an entry served by `provider` (any implementation, e.g. a mock in tests).
    pub fn add_provider(
        &mut self,
        name: &str,
        provider: Arc<dyn AgentProvider>,
    ) -> Result<(), ProviderConfigError> {
        check_name("provider", name).map_err(|reason| ProviderConfigError::entry(name, reason))?;
        if self.entries.contains_key(name) {
            return Err(ProviderConfigError::entry(name, EntryProblem::Twice));
        }
        if self.entries.len() >= MAX_PROVIDERS {
            return Err(ProviderConfigError::entry(
                name,
                EntryProblem::TooManyProviders,
            ));
        }
        self.entries.insert(name.to_owned(), provider);
        Ok(())
    }

    /// Makes `name` the entry for agents that name no provider.
    pub fn set_default(&mut self, name: &str) -> Result<(), DefaultProblem> {
        if !self.entries.contains_key(name) {
            return Err(DefaultProblem::NotConfigured {
                name: name.to_owned(),
                configured: self.names(),
            });
        }
        self.default = Some(name.to_owned());
        Ok(())
    }

    /// The entry names.
    pub fn names(&self) -> String {
        self.entries.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    fn default_entry(&self) -> Option<&str> {
        match &self.default {
            Some(name) => Some(name.as_str()),
            None if self.entries.len() == 1 => self.entries.keys().next().map(String::as_str),
            None => None,
        }
    }

    /// Splits a graph's `model` into the entry that serves it and the model to ask that entry
    /// for: `entry:model`, `entry` (its default model), a bare model (on the default entry), or
    /// nothing (the default entry's default model).
    pub fn resolve<'a>(
        &'a self,
        requested: Option<&'a str>,
    ) -> Result<(&'a str, Option<&'a str>), ProviderError> {
        let invalid = |message: String| ProviderError::new(FailureCode::Invalid, message);
        let Some(requested) = requested.filter(|m| !m.is_empty()) else {
            return self.default_entry().map(|e| (e, None)).ok_or_else(|| {
                invalid(format!(
                    "the agent names no model and no default provider is set; name one as `provider:model` (configured: {})",
                    self.names()
                ))
            });
        };
        if let Some((entry, model)) = requested.split_once(':')
            && let Some((name, _)) = self.entries.get_key_value(entry)
        {
            return Ok((name.as_str(), Some(model).filter(|m| !m.is_empty())));
        }
        if let Some((name, _)) = self.entries.get_key_value(requested) {
            return Ok((name.as_str(), None));
        }
        if let Some((entry, _)) = requested.split_once(':') {
            return Err(invalid(format!(
                "unknown provider {entry:?} in model {requested:?}; configured providers: {}",
                self.names()
            )));
        }
        match self.default_entry() {
            Some(entry) => Ok((entry, Some(requested))),
            None => Err(invalid(format!(
                "model {requested:?} names no provider; write it as `provider:model` (configured: {})",
                self.names()
            ))),
        }
    }

    fn entry(&self, name: &str) -> Result<&Arc<dyn AgentProvider>, ProviderError> {
        self.entries.get(name).ok_or_else(|| {
            ProviderError::new(FailureCode::Invalid, format!("unknown provider {name:?}"))
        })
    }
}

impl AgentProvider for ProviderSet {
    fn check_model(&self, model: Option<&str>) -> Result<(), ProviderError> {
        let (entry, model) = self.resolve(model)?;
        self.entry(entry)?.check_model(model)
    }

    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        progress: ProgressFn<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(async move {
            let (entry, model) = self.resolve(request.model.as_deref())?;
            let provider = self.entry(entry)?;
            let mut routed = request.clone();
            routed.model = model.map(str::to_owned);
            provider
                .turn(&routed, progress, cancel)
                .await
                .map_err(|mut e| {
                    if e.code != FailureCode::Cancelled && !e.message.starts_with("provider ") {
                        e.message = format!("provider {entry}: {}", e.message);
                    }
                    e
                })
        })
    }
}

/// What the agent-provider flags of `runner run`, `runner test` and `relay desktop run` say
/// (their parser is `ProviderArgs` in the binaries' `runner/src/bin/runner/flags.rs`), as plain
/// options.
#[derive(Debug, Clone, Default)]
pub struct ProviderOptions {
    /// A real agent provider (`--provider`).
    pub provider: Option<ProviderKind>,
    /// The provider's base URL, with its version path (`--base-url`; default: the hosted API).
    pub base_url: Option<String>,
    /// The model for agents that name none (`--model`).
    pub model: Option<String>,
    /// The environment variable that holds the API key (`--api-key-env`).
    pub api_key_env: Option<String>,
    /// Sampling temperature (`--temperature`).
    pub temperature: Option<f64>,
    /// USD per million input tokens of the model, for `reported_cost` (`--input-price`).
    pub input_price: Option<f64>,
    /// USD per million output tokens of the model, for `reported_cost` (`--output-price`).
    pub output_price: Option<f64>,
    /// Seconds one provider request may take (`--request-timeout`).
    pub request_timeout: Option<f64>,
    /// A providers file (TOML) naming several providers (`--providers`).
    pub providers: Option<PathBuf>,
}

impl ProviderOptions {
    /// The provider these options describe, or `None` when they name none.
    pub fn build(&self) -> Result<Option<Arc<dyn AgentProvider>>, ProviderConfigError> {
        let mut set = match &self.providers {
            Some(path) => ProviderSet::from_file(path)?,
            None => ProviderSet::default(),
        };
        if let Some(kind) = self.provider {
            let name = kind.as_str();
            let mut config = ProviderConfig::new(name, kind);
            match &self.base_url {
                Some(url) => config.base_url = url.clone(),
                None if kind == ProviderKind::OpenAi => {
                    config.api_key_env = Some(OPENAI_KEY_ENV.to_owned());
                }
                None => {}
            }
            if let Some(var) = &self.api_key_env {
                config.api_key_env = Some(var.clone());
            }
            config.model = self.model.clone();
            config.temperature = self.temperature;
            if let Some(model) = &self.model
                && (self.input_price.is_some() || self.output_price.is_some())
            {
                config.models.insert(
                    model.clone(),
                    Price {
                        input_per_million: self.input_price.unwrap_or(0.0),
                        output_per_million: self.output_price.unwrap_or(0.0),
                    },
                );
            }
            if let Some(secs) = self.request_timeout {
                if !(secs.is_finite() && secs > 0.0 && secs <= MAX_REQUEST_TIMEOUT.as_secs_f64()) {
                    return Err(ProviderConfigError::entry(
                        name,
                        EntryProblem::RequestTimeoutFlag,
                    ));
                }
                config.timeout = Duration::from_secs_f64(secs);
            }
            set.add(config)?;
            // The provider named on the command line serves agents that name no provider.
            set.set_default(name)
                .map_err(|reason| ProviderConfigError::entry(name, reason))?;
        }
        Ok((!set.entries.is_empty()).then(|| Arc::new(set) as Arc<dyn AgentProvider>))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::agents::{Message, Role};
    use crate::host::mock::MockProvider;
    use crate::host::wire::cancelled;

    const FILE: &str = r#"
default = "local"

[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8088/v1"
model = "smollm2"
temperature = 0.0

[providers.claude]
kind = "anthropic"
api_key_env = "GRAPHRELAY_TEST_UNSET_KEY_VAR"
model = "claude-haiku-4-5"
[providers.claude.models]
"claude-haiku-4-5" = { input_per_million = 1.0, output_per_million = 5.0 }
"claude-sonnet-4-5" = {}
"#;

    #[test]
    fn models_resolve_to_an_entry_and_a_model() {
        let set = ProviderSet::parse(FILE).expect("valid");
        assert_eq!(set.resolve(None).expect("default"), ("local", None));
        assert_eq!(
            set.resolve(Some("local:smollm2")).expect("ok"),
            ("local", Some("smollm2"))
        );
        assert_eq!(set.resolve(Some("claude")).expect("ok"), ("claude", None));
        assert_eq!(
            set.resolve(Some("claude:claude-sonnet-4-5")).expect("ok"),
            ("claude", Some("claude-sonnet-4-5"))
        );
        assert_eq!(
            set.resolve(Some("qwen")).expect("ok"),
            ("local", Some("qwen"))
        );
        // Ollama-style names keep their colon after the entry.
        assert_eq!(
            set.resolve(Some("local:llama3:8b")).expect("ok"),
            ("local", Some("llama3:8b"))
        );
        let unknown = set.resolve(Some("openai:gpt-4o")).unwrap_err();
        assert_eq!(unknown.code, FailureCode::Invalid);
        assert!(
            unknown.message.contains("unknown provider \"openai\""),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn unlisted_models_and_missing_keys_are_invalid_before_any_request() {
        let set = ProviderSet::parse(FILE).expect("valid");
        let unlisted = set.check_model(Some("claude:claude-opus-9")).unwrap_err();
        assert_eq!(unlisted.code, FailureCode::Invalid);
        assert!(
            unlisted.message.contains("has no model"),
            "{}",
            unlisted.message
        );
        let no_key = set.check_model(Some("claude")).unwrap_err();
        assert_eq!(no_key.code, FailureCode::Invalid);
        assert!(
            no_key
                .message
                .contains("GRAPHRELAY_TEST_UNSET_KEY_VAR is not set")
        );
        assert!(
            set.check_model(Some("local:anything")).is_ok(),
            "no list: any model"
        );
    }

    #[test]
    fn without_a_default_a_model_must_name_its_provider() {
        let text = FILE.replace("default = \"local\"", "");
        let set = ProviderSet::parse(&text).expect("valid");
        assert_eq!(set.resolve(None).unwrap_err().code, FailureCode::Invalid);
        assert_eq!(
            set.resolve(Some("smollm2")).unwrap_err().code,
            FailureCode::Invalid
        );
        assert!(set.resolve(Some("local:smollm2")).is_ok());
    }

    #[test]
    fn keys_in_the_file_are_refused_without_quoting_them() {
        for field in ["api_key", "API_KEY", "token"] {
            let text =
                format!("[providers.x]\nkind = \"openai\"\n{field} = \"sk-live-do-not-print\"\n");
            let error = ProviderSet::parse(&text).unwrap_err().to_string();
            assert!(error.contains("never read from files"), "{error}");
            assert!(!error.contains("sk-live"), "{error}");
        }
        let broken = "[providers.x]\nkind = \"openai\"\nbase_url = \"sk-live-do-not-print\n";
        let error = ProviderSet::parse(broken).unwrap_err().to_string();
        assert!(error.contains("line 3"), "{error}");
        assert!(!error.contains("sk-live"), "{error}");
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        for (text, needle) in [
            ("", "names no providers"),
            ("[providers.x]\nkind = \"gemini\"\n", "unknown variant"),
            (
                "[providers.x]\nkind = \"openai\"\nextra = 1\n",
                "unknown field",
            ),
            (
                "default = \"y\"\n[providers.x]\nkind = \"openai\"\n",
                "not configured",
            ),
            ("[providers.\"a:b\"]\nkind = \"openai\"\n", "only letters"),
            (
                "[providers.x]\nkind = \"openai\"\nbase_url = \"ftp://h\"\n",
                "http://",
            ),
            (
                "[providers.x]\nkind = \"openai\"\ntemperature = 3.0\n",
                "temperature",
            ),
            (
                "[providers.x]\nkind = \"openai\"\ntimeout_secs = 0\n",
                "timeout_secs",
            ),
            (
                "[providers.x]\nkind = \"openai\"\ntimeout_secs = 3600.5\n",
                "timeout_secs",
            ),
            (
                "[providers.x]\nkind = \"openai\"\nconnect_timeout_secs = 121\n",
                "connect_timeout_secs",
            ),
            (
                "[providers.x]\nkind = \"openai\"\nmax_retries = 11\n",
                "max_retries",
            ),
            (
                "[providers.x]\nkind = \"openai\"\napi_key_env = \"sk-abc def\"\n",
                "NAME of an environment variable",
            ),
            (
                "[providers.x]\nkind = \"openai\"\nmodel = \"b\"\nmodels = { a = {} }\n",
                "not among its models",
            ),
            (
                "[providers.x]\nkind = \"openai\"\nmodels = { a = { input_per_million = -1.0 } }\n",
                "input_per_million",
            ),
        ] {
            let error = ProviderSet::parse(text).unwrap_err().to_string();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
        assert!(
            ProviderSet::parse(
                "[providers.x]\nkind = \"openai\"\nmax_retries = 10\ntimeout_secs = 3600\nconnect_timeout_secs = 120\n"
            )
            .is_ok(),
            "at the limit"
        );
    }

    #[test]
    fn too_many_entries_are_refused() {
        let entries = |n: usize| {
            (0..n)
                .map(|i| {
                    format!("[providers.p{i}]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\n")
                })
                .collect::<String>()
        };
        assert!(ProviderSet::parse(&entries(MAX_PROVIDERS)).is_ok());
        let error = ProviderSet::parse(&entries(MAX_PROVIDERS + 1))
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than"), "{error}");
    }

    #[tokio::test]
    async fn the_set_routes_turns_and_names_the_entry_in_errors() {
        let mut set = ProviderSet::default();
        let ok =
            MockProvider::from_json(serde_json::json!({"default": {"text": "hi"}})).expect("mock");
        let broken = MockProvider::from_json(serde_json::json!({"default": {"error": "boom"}}))
            .expect("mock");
        set.add_provider("a", Arc::new(ok)).expect("add");
        set.add_provider("b", Arc::new(broken)).expect("add");
        assert!(
            set.add_provider("a", Arc::new(NoProviderForTest)).is_err(),
            "twice"
        );
        let request = |model: &str| TurnRequest {
            model: Some(model.into()),
            messages: vec![Message::new(Role::User, "p")],
            tools: Vec::new(),
            max_tokens: None,
            label: None,
            turn: 1,
        };
        let cancel = CancellationToken::new();
        let turn = set
            .turn(&request("a:m1"), &|_| {}, &cancel)
            .await
            .expect("turn");
        assert_eq!((turn.text.as_str(), turn.model.as_str()), ("hi", "m1"));
        let error = set
            .turn(&request("b:m"), &|_| {}, &cancel)
            .await
            .unwrap_err();
        assert_eq!(error.message, "provider b: boom");
    }

    struct NoProviderForTest;
    impl AgentProvider for NoProviderForTest {
        fn turn<'a>(
            &'a self,
            _: &'a TurnRequest,
            _: ProgressFn<'a>,
            _: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
            Box::pin(async { Err(cancelled()) })
        }
    }
}
