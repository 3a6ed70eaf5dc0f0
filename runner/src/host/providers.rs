//! Choosing a model: provider entries (an [`openai`](super::openai) or
//! [`anthropic`](super::anthropic) endpoint each, with a default model, an optional list of the
//! models a graph may ask for, prices and limits), the providers file (TOML) that names several,
//! the command-line flags for one, and [`ProviderSet`], the provider a run uses: it reads the
//! graph's `model: "entry:model"`, checks it and hands the turn to that entry.
//!
//! ```toml
//! default = "local"                      # for agents that name no model
//!
//! [providers.local]
//! kind = "openai"                        # any OpenAI-compatible server
//! base_url = "http://127.0.0.1:8088/v1"
//! model = "smollm2"                      # for `model: "local"` and agents that name none
//! temperature = 0.0
//!
//! [providers.anthropic]
//! kind = "anthropic"
//! api_key_env = "ANTHROPIC_API_KEY"     # the NAME of a variable: keys are never read from files
//! model = "claude-haiku-4-5"
//! [providers.anthropic.models]           # when present, the only models a graph may ask for
//! "claude-haiku-4-5" = { input_per_million = 1.0, output_per_million = 5.0 }   # USD
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use graph_js::FailureCode;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::agents::{
    AgentProvider, ProgressFn, ProviderError, ToolCall, ToolSpec, Turn, TurnRequest, Usage,
};
use super::anthropic::AnthropicProvider;
use super::approvals::BoxFuture;
use super::http::{
    ApiKey, CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, MAX_CONNECT_TIMEOUT, MAX_REQUEST_TIMEOUT,
    MAX_RETRIES, RetryPolicy,
};
use super::mock::CHARS_PER_TOKEN;
use super::openai::OpenAiProvider;

/// Largest providers file read.
pub const MAX_PROVIDERS_FILE_BYTES: u64 = 1024 * 1024;
/// Most provider entries in one file.
pub const MAX_PROVIDERS: usize = 64;
/// Most models listed for one entry.
pub const MAX_MODELS_PER_PROVIDER: usize = 256;
/// Longest entry or model name.
pub const MAX_NAME_CHARS: usize = 128;
/// Highest accepted price, USD per million tokens (a typo guard: no model costs this much).
pub const MAX_PRICE_PER_MILLION: f64 = 10_000.0;
/// Highest accepted sampling temperature (both APIs accept 0 to 2 at most).
pub const MAX_TEMPERATURE: f64 = 2.0;
/// Longest tool name both APIs accept (`^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// The OpenAI API, by default.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The Anthropic API, by default.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
/// The variable holding the key for the hosted OpenAI API, by default.
pub const OPENAI_KEY_ENV: &str = "OPENAI_API_KEY";
/// The variable holding the Anthropic key, by default.
pub const ANTHROPIC_KEY_ENV: &str = "ANTHROPIC_API_KEY";

/// Keys a providers file may not hold: credentials belong in the environment.
const SECRET_FIELDS: &[&str] = &[
    "api_key",
    "apikey",
    "key",
    "token",
    "secret",
    "password",
    "authorization",
];

/// Which API an entry speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
pub enum ProviderKind {
    /// OpenAI's chat completions (OpenAI, llama.cpp, Ollama, vLLM, LM Studio).
    #[serde(rename = "openai")]
    #[value(name = "openai")]
    OpenAi,
    /// Anthropic's Messages API.
    #[serde(rename = "anthropic")]
    #[value(name = "anthropic")]
    Anthropic,
}

impl ProviderKind {
    /// The kind's name, as written in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => OPENAI_BASE_URL,
            ProviderKind::Anthropic => ANTHROPIC_BASE_URL,
        }
    }
}

/// How an OpenAI-compatible API names the generated-token limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`: what local servers understand.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI's newer models require.
    MaxCompletionTokens,
}

/// A model's price in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    #[serde(default)]
    pub input_per_million: f64,
    /// Per million generated tokens.
    #[serde(default)]
    pub output_per_million: f64,
}

impl Price {
    /// The cost of `usage`.
    pub fn cost(&self, usage: Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_million
            + usage.output_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }

    fn check(&self) -> Result<(), String> {
        for (what, value) in [
            ("input_per_million", self.input_per_million),
            ("output_per_million", self.output_per_million),
        ] {
            if !(value.is_finite() && (0.0..=MAX_PRICE_PER_MILLION).contains(&value)) {
                return Err(format!(
                    "{what} must be from 0 to {MAX_PRICE_PER_MILLION} (USD per million tokens), got {value}"
                ));
            }
        }
        Ok(())
    }
}

/// One provider entry.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The entry's name: the part before `:` in a graph's `model`.
    pub name: String,
    /// The API it speaks.
    pub kind: ProviderKind,
    /// The API's base URL (`.../v1`).
    pub base_url: String,
    /// The model for agents that name none.
    pub model: Option<String>,
    /// Prices by model; with `only_listed_models`, also the only models a graph may ask for.
    pub models: BTreeMap<String, Price>,
    /// Refuse models not in `models`.
    pub only_listed_models: bool,
    /// The environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// A key given directly (an embedder's keychain, tests); wins over `api_key_env`.
    pub api_key: Option<ApiKey>,
    /// Sampling temperature (the server's default when unset).
    pub temperature: Option<f64>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Time to open a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Retries and backoff.
    pub retry: RetryPolicy,
    /// Stream replies (progress in the trace while generating).
    pub stream: bool,
    /// OpenAI only: the name of the generated-token limit.
    pub max_tokens_field: MaxTokensField,
}

impl ProviderConfig {
    /// An entry called `name` for `kind` with the defaults: the kind's hosted base URL and key
    /// variable, streaming, [`DEFAULT_REQUEST_TIMEOUT`], the default retry policy.
    pub fn new(name: impl Into<String>, kind: ProviderKind) -> Self {
        Self {
            name: name.into(),
            kind,
            base_url: kind.default_base_url().to_owned(),
            model: None,
            models: BTreeMap::new(),
            only_listed_models: false,
            api_key_env: match kind {
                ProviderKind::OpenAi => None,
                ProviderKind::Anthropic => Some(ANTHROPIC_KEY_ENV.to_owned()),
            },
            api_key: None,
            temperature: None,
            timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            retry: RetryPolicy::default(),
            stream: true,
            max_tokens_field: MaxTokensField::default(),
        }
    }

    /// The model to send for `requested` (the part after `entry:`, or none).
    pub fn model_for(&self, requested: Option<&str>) -> Result<String, ProviderError> {
        let model = match requested.filter(|m| !m.is_empty()) {
            Some(model) => model.to_owned(),
            None => match (&self.model, self.models.len()) {
                (Some(model), _) => model.clone(),
                (None, 1) => self.models.keys().next().cloned().unwrap_or_default(),
                (None, _) => {
                    return Err(ProviderError::new(
                        FailureCode::Invalid,
                        format!(
                            "provider {}: the agent names no model and the provider has no default model",
                            self.name
                        ),
                    ));
                }
            },
        };
        if self.only_listed_models && !self.models.contains_key(&model) {
            return Err(ProviderError::new(
                FailureCode::Invalid,
                format!(
                    "provider {} has no model {model:?}; it offers: {}",
                    self.name,
                    self.models.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        Ok(model)
    }

    /// The cost of `usage` on `model`, from the price table (0 when the model has no price).
    pub fn cost(&self, model: &str, usage: Usage) -> f64 {
        self.models.get(model).map_or(0.0, |p| p.cost(usage))
    }

    fn check(&self) -> Result<(), String> {
        check_name("provider", &self.name)?;
        if let Some(model) = &self.model {
            check_name("model", model)?;
        }
        if self.models.len() > MAX_MODELS_PER_PROVIDER {
            return Err(format!(
                "more than {MAX_MODELS_PER_PROVIDER} models are listed"
            ));
        }
        for (model, price) in &self.models {
            check_name("model", model)?;
            price.check().map_err(|e| format!("model {model}: {e}"))?;
        }
        if let Some(var) = &self.api_key_env {
            check_env_name(var)?;
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&t))
        {
            return Err(format!(
                "temperature must be from 0 to {MAX_TEMPERATURE}, got {t}"
            ));
        }
        if self.timeout.is_zero() || self.timeout > MAX_REQUEST_TIMEOUT {
            return Err(format!(
                "the request timeout must be above 0 and at most {} s",
                MAX_REQUEST_TIMEOUT.as_secs()
            ));
        }
        if self.connect_timeout.is_zero() || self.connect_timeout > MAX_CONNECT_TIMEOUT {
            return Err(format!(
                "the connect timeout must be above 0 and at most {} s",
                MAX_CONNECT_TIMEOUT.as_secs()
            ));
        }
        if self.retry.max_retries > MAX_RETRIES {
            return Err(format!("max_retries must be at most {MAX_RETRIES}"));
        }
        Ok(())
    }

    /// The provider this entry describes.
    pub fn build(self) -> Result<Arc<dyn AgentProvider>, ProviderConfigError> {
        self.check()
            .map_err(|reason| ProviderConfigError::entry(&self.name, reason))?;
        Ok(match self.kind {
            ProviderKind::OpenAi => Arc::new(OpenAiProvider::new(self)?),
            ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(self)?),
        })
    }
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "a {what} name must have 1 to {MAX_NAME_CHARS} characters, got {name:?}"
        ));
    }
    if what == "provider"
        && !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(format!(
            "provider name {name:?} may use only letters, digits, `_`, `-` and `.` (it is the part before `:` in a model)"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!(
            "the {what} name {name:?} contains control characters"
        ));
    }
    Ok(())
}

fn check_env_name(var: &str) -> Result<(), String> {
    let mut chars = var.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        || var.len() > MAX_NAME_CHARS
    {
        // The value is not quoted: it may be a key put in the wrong place.
        return Err(
            "api_key_env must be the NAME of an environment variable (letters, digits and `_`, not starting with a digit); the value given is not one and is not shown, in case it is a key".to_owned(),
        );
    }
    Ok(())
}

/// Why provider settings were refused. Never quotes a credential.
#[derive(Debug, thiserror::Error)]
pub enum ProviderConfigError {
    /// The providers file could not be read.
    #[error("cannot read the providers file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong (including a file over the size limit).
        reason: crate::input::InputError,
    },
    /// The file is not a valid providers file.
    #[error("the providers file {path} is not valid: {reason}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// One entry is not valid.
    #[error("provider {name}: {reason}")]
    Entry {
        /// The entry.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

impl ProviderConfigError {
    pub(crate) fn entry(name: &str, reason: impl Into<String>) -> Self {
        Self::Entry {
            name: name.to_owned(),
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIn {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    providers: BTreeMap<String, EntryIn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryIn {
    kind: ProviderKind,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    models: Option<BTreeMap<String, Price>>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    timeout_secs: Option<f64>,
    #[serde(default)]
    connect_timeout_secs: Option<f64>,
    #[serde(default)]
    max_retries: Option<u32>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    max_tokens_field: Option<MaxTokensField>,
}

impl EntryIn {
    fn into_config(self, name: &str) -> Result<ProviderConfig, String> {
        let mut config = ProviderConfig::new(name, self.kind);
        if let Some(url) = self.base_url {
            config.base_url = url;
        } else if self.kind == ProviderKind::OpenAi {
            config.api_key_env = Some(OPENAI_KEY_ENV.to_owned());
        }
        if self.api_key_env.is_some() {
            config.api_key_env = self.api_key_env;
        }
        config.model = self.model;
        if let Some(models) = self.models {
            config.only_listed_models = true;
            config.models = models;
        }
        if let (Some(model), true) = (&config.model, config.only_listed_models)
            && !config.models.contains_key(model)
        {
            return Err(format!(
                "the default model {model:?} is not among its models"
            ));
        }
        config.temperature = self.temperature;
        if let Some(secs) = self.timeout_secs {
            if !(secs.is_finite() && secs > 0.0 && secs <= MAX_REQUEST_TIMEOUT.as_secs_f64()) {
                return Err(format!(
                    "timeout_secs must be above 0 and at most {}, got {secs}",
                    MAX_REQUEST_TIMEOUT.as_secs()
                ));
            }
            config.timeout = Duration::from_secs_f64(secs);
        }
        if let Some(secs) = self.connect_timeout_secs {
            if !(secs.is_finite() && secs > 0.0 && secs <= MAX_CONNECT_TIMEOUT.as_secs_f64()) {
                return Err(format!(
                    "connect_timeout_secs must be above 0 and at most {}, got {secs}",
                    MAX_CONNECT_TIMEOUT.as_secs()
                ));
            }
            config.connect_timeout = Duration::from_secs_f64(secs);
        }
        if let Some(n) = self.max_retries {
            config.retry.max_retries = n;
        }
        if let Some(stream) = self.stream {
            config.stream = stream;
        }
        if let Some(field) = self.max_tokens_field {
            config.max_tokens_field = field;
        }
        Ok(config)
    }
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
        let invalid = |reason: String| ProviderConfigError::File {
            path: "(text)".to_owned(),
            reason,
        };
        // Parsed as a table first, so a credential is refused by name, and syntax errors are
        // reported by line without quoting the line (it could hold a key).
        let table: toml::Table = toml::from_str(text).map_err(|e| invalid(toml_error(text, &e)))?;
        refuse_secrets(&table).map_err(invalid)?;
        let file: FileIn =
            toml::Table::try_into(table).map_err(|e| invalid(e.message().to_owned()))?;
        if file.providers.is_empty() {
            return Err(invalid(
                "it names no providers ([providers.NAME] tables)".to_owned(),
            ));
        }
        if file.providers.len() > MAX_PROVIDERS {
            return Err(invalid(format!(
                "it names more than {MAX_PROVIDERS} providers"
            )));
        }
        let mut set = Self::default();
        for (name, entry) in file.providers {
            let config = entry
                .into_config(&name)
                .map_err(|reason| ProviderConfigError::entry(&name, reason))?;
            set.add(config)?;
        }
        if let Some(default) = file.default {
            set.set_default(&default).map_err(invalid)?;
        }
        Ok(set)
    }

    /// Adds an entry built from `config`.
    pub fn add(&mut self, config: ProviderConfig) -> Result<(), ProviderConfigError> {
        let name = config.name.clone();
        let provider = config.build()?;
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
            return Err(ProviderConfigError::entry(name, "is configured twice"));
        }
        if self.entries.len() >= MAX_PROVIDERS {
            return Err(ProviderConfigError::entry(
                name,
                format!("more than {MAX_PROVIDERS} providers"),
            ));
        }
        self.entries.insert(name.to_owned(), provider);
        Ok(())
    }

    /// Makes `name` the entry for agents that name no provider.
    pub fn set_default(&mut self, name: &str) -> Result<(), String> {
        if !self.entries.contains_key(name) {
            return Err(format!(
                "the default provider {name:?} is not configured; configured: {}",
                self.names()
            ));
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

/// `toml`'s error without the quoted source line: the message and where.
fn toml_error(text: &str, error: &toml::de::Error) -> String {
    match error.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", error.message())
        }
        None => error.message().to_owned(),
    }
}

fn refuse_secrets(table: &toml::Table) -> Result<(), String> {
    fn walk(path: &str, table: &toml::Table) -> Result<(), String> {
        for (key, value) in table {
            if SECRET_FIELDS.contains(&key.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "{path}{key}: API keys are never read from files; put the key in an environment variable and give its name as api_key_env"
                ));
            }
            if let toml::Value::Table(inner) = value {
                walk(&format!("{path}{key}."), inner)?;
            }
        }
        Ok(())
    }
    walk("", table)
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
    /// `model: "NAME:MODEL"` (see the README).
    #[arg(long, value_name = "FILE")]
    pub providers: Option<PathBuf>,
}

impl ProviderArgs {
    /// The provider these flags describe, or `None` when they name none.
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
                        format!(
                            "--request-timeout must be above 0 and at most {} seconds",
                            MAX_REQUEST_TIMEOUT.as_secs()
                        ),
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

/// Maps tool names to names both APIs accept (`fs.read` becomes `fs_read`) and back.
#[derive(Debug, Default)]
pub(crate) struct ToolNames {
    /// `(real, wire)` pairs.
    pairs: Vec<(String, String)>,
}

impl ToolNames {
    pub(crate) fn new(tools: &[ToolSpec]) -> Self {
        let mut names = Self::default();
        for tool in tools {
            let base = sanitize(&tool.name);
            let mut wire = base.clone();
            let mut n = 2;
            while names.pairs.iter().any(|(_, w)| *w == wire) {
                let suffix = format!("_{n}");
                let keep = MAX_TOOL_NAME_CHARS.saturating_sub(suffix.len());
                wire = format!("{}{suffix}", base.chars().take(keep).collect::<String>());
                n += 1;
            }
            names.pairs.push((tool.name.clone(), wire));
        }
        names
    }

    /// The name sent for the tool `real`.
    pub(crate) fn wire(&self, real: &str) -> String {
        self.pairs
            .iter()
            .find(|(r, _)| r == real)
            .map_or_else(|| sanitize(real), |(_, w)| w.clone())
    }

    /// The tool a model's `name` means: a name we sent, or (when a model copied it from the
    /// prompt) the tool's own name; anything else as it came (the loop refuses it).
    pub(crate) fn real(&self, name: &str) -> String {
        self.pairs
            .iter()
            .find(|(_, w)| w == name)
            .or_else(|| self.pairs.iter().find(|(r, _)| r == name))
            .map_or_else(|| name.to_owned(), |(r, _)| r.clone())
    }
}

fn sanitize(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME_CHARS)
        .collect();
    if cleaned.is_empty() {
        "tool".to_owned()
    } else {
        cleaned
    }
}

/// Where a provider's API key comes from.
#[derive(Debug, Clone)]
pub(crate) enum Credential {
    /// The entry names no key (a local server).
    NotNeeded,
    /// The key.
    Key(ApiKey),
    /// The entry names a variable that is not set.
    Missing(String),
}

impl Credential {
    pub(crate) fn of(config: &ProviderConfig) -> Self {
        if let Some(key) = &config.api_key {
            return Self::Key(key.clone());
        }
        match config.api_key_env.as_deref() {
            None => Self::NotNeeded,
            Some(var) => {
                ApiKey::from_env(var).map_or_else(|| Self::Missing(var.to_owned()), Self::Key)
            }
        }
    }

    /// The key to send, or why there is none although one is needed.
    pub(crate) fn key(&self, config: &ProviderConfig) -> Result<Option<&ApiKey>, ProviderError> {
        match self {
            Self::NotNeeded => Ok(None),
            Self::Key(key) => Ok(Some(key)),
            Self::Missing(var) => Err(ProviderError::new(
                FailureCode::Invalid,
                format!(
                    "provider {}: the environment variable {var} is not set; it must hold the API key",
                    config.name
                ),
            )),
        }
    }
}

/// The failure of a turn stopped by the run's cancellation.
/// What an HTTP provider needs besides its config: the URI of `path` under the base URL, the
/// credential (its key read from the environment now) and a client.
pub(crate) fn http_parts(
    config: &ProviderConfig,
    path: &str,
) -> Result<(http::Uri, Credential, super::http::HttpClient), ProviderConfigError> {
    let uri = super::http::endpoint(&config.base_url, path)
        .map_err(|reason| ProviderConfigError::entry(&config.name, reason))?;
    let credential = Credential::of(config);
    let client = super::http::HttpClient::new(config.connect_timeout)
        .map_err(|reason| ProviderConfigError::entry(&config.name, reason))?;
    Ok((uri, credential, client))
}

/// A request body as bytes.
pub(crate) fn encode_body(body: &Value) -> Result<bytes::Bytes, ProviderError> {
    serde_json::to_vec(body)
        .map(bytes::Bytes::from)
        .map_err(|e| {
            ProviderError::new(
                FailureCode::Failed,
                format!("cannot encode the request: {e}"),
            )
        })
}

/// What both HTTP providers do around their attempts (`work`): the run's cancel wins, and
/// dropping `work` then drops the request in flight and closes its connection, which is how a
/// server learns to stop generating; the reply gets the model it was asked of when the server
/// named none, and its cost from `config`'s price table.
pub(crate) async fn finish_turn(
    config: &ProviderConfig,
    model: &str,
    work: impl std::future::Future<Output = Result<Turn, ProviderError>>,
    cancel: &CancellationToken,
) -> Result<Turn, ProviderError> {
    let mut turn = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(cancelled()),
        turn = work => turn?,
    };
    if turn.model.is_empty() {
        turn.model = model.to_owned();
    }
    turn.cost = config.cost(model, turn.usage);
    Ok(turn)
}

pub(crate) fn cancelled() -> ProviderError {
    ProviderError::new(
        FailureCode::Cancelled,
        "the run was cancelled during a generation",
    )
}

/// Tool-call arguments from the model's JSON text: an object as sent, `{}` for nothing, and
/// text that is not JSON kept as a string (the tool loop then answers the model that the
/// arguments must be an object, so it can try again).
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Usage estimated as the mock does (`ceil(chars / 4)`), for servers that report none.
pub(crate) fn estimate_usage(request: &TurnRequest, text: &str, calls: &[ToolCall]) -> Usage {
    let sent: usize = request
        .messages
        .iter()
        .map(|m| m.content.chars().count())
        .sum();
    let generated = text.chars().count()
        + calls
            .iter()
            .map(|c| c.name.chars().count() + c.arguments.to_string().chars().count())
            .sum::<usize>();
    Usage {
        input_tokens: (sent as u64).div_ceil(CHARS_PER_TOKEN),
        output_tokens: (generated as u64).div_ceil(CHARS_PER_TOKEN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::mock::MockProvider;

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

    #[test]
    fn prices_give_costs() {
        let price = Price {
            input_per_million: 1.0,
            output_per_million: 5.0,
        };
        let usage = Usage {
            input_tokens: 2_000,
            output_tokens: 1_000,
        };
        assert!((price.cost(usage) - 0.007).abs() < 1e-12);
        let mut config = ProviderConfig::new("x", ProviderKind::OpenAi);
        config.models.insert("m".into(), price);
        assert!((config.cost("m", usage) - 0.007).abs() < 1e-12);
        assert_eq!(config.cost("other", usage), 0.0);
    }

    #[test]
    fn tool_names_are_made_safe_and_mapped_back() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: Value::Null,
        };
        let names = ToolNames::new(&[spec("fs.read"), spec("fs_read"), spec(&"x".repeat(80))]);
        assert_eq!(names.wire("fs.read"), "fs_read");
        assert_eq!(names.wire("fs_read"), "fs_read_2");
        assert_eq!(names.wire(&"x".repeat(80)).len(), MAX_TOOL_NAME_CHARS);
        assert_eq!(names.real("fs_read"), "fs.read");
        assert_eq!(names.real("fs_read_2"), "fs_read");
        assert_eq!(
            names.real("fs.read"),
            "fs.read",
            "a model that copied the real name"
        );
        assert_eq!(
            names.real("shell.exec"),
            "shell.exec",
            "unknown names pass through"
        );
    }

    #[test]
    fn arguments_are_parsed_leniently() {
        assert_eq!(parse_arguments(""), serde_json::json!({}));
        assert_eq!(parse_arguments("{\"a\":1}"), serde_json::json!({"a": 1}));
        assert_eq!(parse_arguments("{oops"), Value::String("{oops".into()));
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
            messages: vec![super::super::agents::Message::new(
                super::super::agents::Role::User,
                "p",
            )],
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
