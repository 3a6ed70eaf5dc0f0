//! Provider entries: which API an entry speaks ([`ProviderKind`]), its base URL, default model,
//! the models a graph may ask for with their prices and its limits ([`ProviderConfig`]), and the
//! providers file (TOML) that names several. Settings and their checks only: the wire dialects
//! and the routing of a graph's `model` (`providers`) build on this module, never the reverse.
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
use std::time::Duration;

use graph_js::FailureCode;
use serde::Deserialize;

use super::agents::{ProviderError, Usage};
use super::http::{
    ApiKey, CONNECT_TIMEOUT, ClientError, DEFAULT_REQUEST_TIMEOUT, EndpointError,
    MAX_CONNECT_TIMEOUT, MAX_REQUEST_TIMEOUT, MAX_RETRIES, RetryPolicy,
};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ProviderKind {
    /// OpenAI's chat completions (OpenAI, llama.cpp, Ollama, vLLM, LM Studio).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic's Messages API.
    #[serde(rename = "anthropic")]
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

    fn check(&self) -> Result<(), EntryProblem> {
        for (field, value) in [
            ("input_per_million", self.input_per_million),
            ("output_per_million", self.output_per_million),
        ] {
            if !(value.is_finite() && (0.0..=MAX_PRICE_PER_MILLION).contains(&value)) {
                return Err(EntryProblem::Price { field, value });
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

    pub(crate) fn check(&self) -> Result<(), EntryProblem> {
        check_name("provider", &self.name)?;
        if let Some(model) = &self.model {
            check_name("model", model)?;
        }
        if self.models.len() > MAX_MODELS_PER_PROVIDER {
            return Err(EntryProblem::TooManyModels);
        }
        for (model, price) in &self.models {
            check_name("model", model)?;
            price.check().map_err(|problem| EntryProblem::Model {
                model: model.clone(),
                problem: Box::new(problem),
            })?;
        }
        if let Some(var) = &self.api_key_env {
            check_env_name(var)?;
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&t))
        {
            return Err(EntryProblem::Temperature(t));
        }
        if self.timeout.is_zero() || self.timeout > MAX_REQUEST_TIMEOUT {
            return Err(EntryProblem::RequestTimeout);
        }
        if self.connect_timeout.is_zero() || self.connect_timeout > MAX_CONNECT_TIMEOUT {
            return Err(EntryProblem::ConnectTimeout);
        }
        if self.retry.max_retries > MAX_RETRIES {
            return Err(EntryProblem::MaxRetries);
        }
        Ok(())
    }
}

/// Checks an entry's (`what` = `provider`) or a model's name.
pub(crate) fn check_name(what: &'static str, name: &str) -> Result<(), EntryProblem> {
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(EntryProblem::NameLength {
            what,
            name: name.to_owned(),
        });
    }
    if what == "provider"
        && !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(EntryProblem::ProviderNameChars(name.to_owned()));
    }
    if name.chars().any(char::is_control) {
        return Err(EntryProblem::NameControl {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

fn check_env_name(var: &str) -> Result<(), EntryProblem> {
    let mut chars = var.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        || var.len() > MAX_NAME_CHARS
    {
        // The value is not quoted: it may be a key put in the wrong place.
        return Err(EntryProblem::KeyEnvName);
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
        reason: FileProblem,
    },
    /// One entry is not valid.
    #[error("provider {name}: {reason}")]
    Entry {
        /// The entry.
        name: String,
        /// What is wrong.
        reason: EntryProblem,
    },
}

impl ProviderConfigError {
    pub(crate) fn entry(name: &str, reason: impl Into<EntryProblem>) -> Self {
        Self::Entry {
            name: name.to_owned(),
            reason: reason.into(),
        }
    }
}

/// What is wrong with a providers file as a whole.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    /// Not TOML: `toml`'s message and where, without the line (it could hold a key).
    #[error("{0}")]
    Syntax(String),
    /// A field that could hold a credential (`api_key`, `token`, ...), by its dotted path.
    #[error(
        "{0}: API keys are never read from files; put the key in an environment variable and give its name as api_key_env"
    )]
    Secret(String),
    /// TOML that does not fit the format (`toml`'s message).
    #[error("{0}")]
    Shape(String),
    /// No `[providers.NAME]` tables.
    #[error("it names no providers ([providers.NAME] tables)")]
    NoProviders,
    /// Over [`MAX_PROVIDERS`] entries.
    #[error("it names more than {MAX_PROVIDERS} providers")]
    TooManyProviders,
    /// `default` names no entry of the file.
    #[error(transparent)]
    Default(#[from] DefaultProblem),
}

/// Why an entry cannot be the default.
#[derive(Debug, thiserror::Error)]
pub enum DefaultProblem {
    /// No entry has that name.
    #[error("the default provider {name:?} is not configured; configured: {configured}")]
    NotConfigured {
        /// The name asked for.
        name: String,
        /// The entries there are, comma-separated.
        configured: String,
    },
}

/// What is wrong with one provider entry.
#[derive(Debug, thiserror::Error)]
pub enum EntryProblem {
    /// A name that is empty or too long (`what`: `provider` or `model`).
    #[error("a {what} name must have 1 to {MAX_NAME_CHARS} characters, got {name:?}")]
    NameLength {
        /// `provider` or `model`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// An entry name with characters other than letters, digits, `_`, `-` and `.`.
    #[error(
        "provider name {0:?} may use only letters, digits, `_`, `-` and `.` (it is the part before `:` in a model)"
    )]
    ProviderNameChars(String),
    /// A name with control characters.
    #[error("the {what} name {name:?} contains control characters")]
    NameControl {
        /// `provider` or `model`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// Over [`MAX_MODELS_PER_PROVIDER`] models.
    #[error("more than {MAX_MODELS_PER_PROVIDER} models are listed")]
    TooManyModels,
    /// A listed model's entry is not valid.
    #[error("model {model}: {problem}")]
    Model {
        /// The model.
        model: String,
        /// What is wrong with it.
        problem: Box<EntryProblem>,
    },
    /// A price outside 0 to [`MAX_PRICE_PER_MILLION`].
    #[error(
        "{field} must be from 0 to {MAX_PRICE_PER_MILLION} (USD per million tokens), got {value}"
    )]
    Price {
        /// `input_per_million` or `output_per_million`.
        field: &'static str,
        /// The price given.
        value: f64,
    },
    /// `api_key_env` is not the name of a variable (the value is not shown: it may be a key).
    #[error(
        "api_key_env must be the NAME of an environment variable (letters, digits and `_`, not starting with a digit); the value given is not one and is not shown, in case it is a key"
    )]
    KeyEnvName,
    /// A temperature outside 0 to [`MAX_TEMPERATURE`].
    #[error("temperature must be from 0 to {MAX_TEMPERATURE}, got {0}")]
    Temperature(f64),
    /// A per-request timeout of 0 or over [`MAX_REQUEST_TIMEOUT`].
    #[error("the request timeout must be above 0 and at most {} s", MAX_REQUEST_TIMEOUT.as_secs())]
    RequestTimeout,
    /// A connect timeout of 0 or over [`MAX_CONNECT_TIMEOUT`].
    #[error("the connect timeout must be above 0 and at most {} s", MAX_CONNECT_TIMEOUT.as_secs())]
    ConnectTimeout,
    /// More retries than [`MAX_RETRIES`].
    #[error("max_retries must be at most {MAX_RETRIES}")]
    MaxRetries,
    /// `timeout_secs` in a file: 0 or over [`MAX_REQUEST_TIMEOUT`].
    #[error(
        "timeout_secs must be above 0 and at most {max}, got {0}",
        max = MAX_REQUEST_TIMEOUT.as_secs()
    )]
    TimeoutSecs(f64),
    /// `connect_timeout_secs` in a file: 0 or over [`MAX_CONNECT_TIMEOUT`].
    #[error(
        "connect_timeout_secs must be above 0 and at most {max}, got {0}",
        max = MAX_CONNECT_TIMEOUT.as_secs()
    )]
    ConnectTimeoutSecs(f64),
    /// `--request-timeout`: 0 or over [`MAX_REQUEST_TIMEOUT`].
    #[error(
        "--request-timeout must be above 0 and at most {} seconds",
        MAX_REQUEST_TIMEOUT.as_secs()
    )]
    RequestTimeoutFlag,
    /// A default model that is not among the listed models.
    #[error("the default model {0:?} is not among its models")]
    DefaultModelNotListed(String),
    /// Two entries with one name.
    #[error("is configured twice")]
    Twice,
    /// Over [`MAX_PROVIDERS`] entries.
    #[error("more than {MAX_PROVIDERS} providers")]
    TooManyProviders,
    /// The entry cannot be the default.
    #[error(transparent)]
    Default(#[from] DefaultProblem),
    /// The base URL is not an http(s) URL with a host.
    #[error(transparent)]
    BaseUrl(#[from] EndpointError),
    /// The HTTP client could not be set up.
    #[error(transparent)]
    Client(#[from] ClientError),
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
pub(crate) struct EntryIn {
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
    pub(crate) fn into_config(self, name: &str) -> Result<ProviderConfig, EntryProblem> {
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
            return Err(EntryProblem::DefaultModelNotListed(model.clone()));
        }
        config.temperature = self.temperature;
        if let Some(secs) = self.timeout_secs {
            if !(secs.is_finite() && secs > 0.0 && secs <= MAX_REQUEST_TIMEOUT.as_secs_f64()) {
                return Err(EntryProblem::TimeoutSecs(secs));
            }
            config.timeout = Duration::from_secs_f64(secs);
        }
        if let Some(secs) = self.connect_timeout_secs {
            if !(secs.is_finite() && secs > 0.0 && secs <= MAX_CONNECT_TIMEOUT.as_secs_f64()) {
                return Err(EntryProblem::ConnectTimeoutSecs(secs));
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

/// A providers file, parsed and checked as a whole; each entry is checked when it is built.
#[derive(Debug)]
pub(crate) struct ProvidersFile {
    /// The entry for agents that name no provider.
    pub(crate) default: Option<String>,
    /// The entries, by name.
    pub(crate) entries: BTreeMap<String, EntryIn>,
}

/// The file-level failure `reason`, before the caller names the file.
pub(crate) fn invalid_file(reason: impl Into<FileProblem>) -> ProviderConfigError {
    ProviderConfigError::File {
        path: "(text)".to_owned(),
        reason: reason.into(),
    }
}

/// Parses the text of a providers file (its entries are not checked yet).
pub(crate) fn parse_file(text: &str) -> Result<ProvidersFile, ProviderConfigError> {
    // Parsed as a table first, so a credential is refused by name, and syntax errors are
    // reported by line without quoting the line (it could hold a key).
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| invalid_file(FileProblem::Syntax(toml_error(text, &e))))?;
    refuse_secrets(&table).map_err(invalid_file)?;
    let file: FileIn = toml::Table::try_into(table)
        .map_err(|e| invalid_file(FileProblem::Shape(e.message().to_owned())))?;
    if file.providers.is_empty() {
        return Err(invalid_file(FileProblem::NoProviders));
    }
    if file.providers.len() > MAX_PROVIDERS {
        return Err(invalid_file(FileProblem::TooManyProviders));
    }
    Ok(ProvidersFile {
        default: file.default,
        entries: file.providers,
    })
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

fn refuse_secrets(table: &toml::Table) -> Result<(), FileProblem> {
    fn walk(path: &str, table: &toml::Table) -> Result<(), FileProblem> {
        for (key, value) in table {
            if SECRET_FIELDS.contains(&key.to_ascii_lowercase().as_str()) {
                return Err(FileProblem::Secret(format!("{path}{key}")));
            }
            if let toml::Value::Table(inner) = value {
                walk(&format!("{path}{key}."), inner)?;
            }
        }
        Ok(())
    }
    walk("", table)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
