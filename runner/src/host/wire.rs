//! What the two wire dialects ([`openai`](super::openai), [`anthropic`](super::anthropic))
//! share: tool names both APIs accept, where the API key comes from, the endpoint and client of
//! an entry, request encoding, the cancel-aware end of a turn and the usage estimate for servers
//! that report none.

use graph_js::FailureCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::agents::{ProviderError, ToolCall, ToolSpec, Turn, TurnRequest, Usage};
use super::http::ApiKey;
use super::mock::CHARS_PER_TOKEN;
use super::provider_config::{ProviderConfig, ProviderConfigError};

/// Longest tool name both APIs accept (`^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME_CHARS: usize = 64;

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

/// The failure of a turn stopped by the run's cancellation.
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
}
