//! The `meta` export every graph carries: name, slug, version, description, and optionally
//! `args`, the JSON Schema of the graph's arguments.

use std::fmt;

/// Longest accepted `meta.name`, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// What a graph without a callable default export is told (as a meta refusal and as a
/// script error alike).
pub(crate) const NO_DEFAULT_EXPORT: &str = "the graph has no default export function: write `export default async function (args, g) { ... }`";
/// Longest accepted `meta.slug`, in characters.
pub const MAX_SLUG_CHARS: usize = 64;
/// Longest accepted `meta.version`, in characters.
pub const MAX_VERSION_CHARS: usize = 64;
/// Longest accepted `meta.description`, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 2000;

/// A graph's validated metadata.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    /// Human-readable name.
    pub name: String,
    /// Identifier used by `g.graph(slug)` and by the relay: `[a-z0-9][a-z0-9_-]*`.
    pub slug: String,
    /// Version text, e.g. `1.0.0`.
    pub version: String,
    /// What the graph does (may be empty).
    pub description: String,
    /// The JSON Schema (draft 2020-12) its arguments must fit, if it declares one. Here it is
    /// only known to be an object; the runner checks it as a schema (`graph-args`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
}

/// Why a graph's metadata could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaError {
    /// The module did not parse or its top-level code failed.
    Script(String),
    /// There is no `meta` export.
    Missing,
    /// `meta` exists but is not valid.
    Invalid(String),
    /// The module has no callable default export (the message of
    /// [`crate::ScriptError::NoDefaultExport`]).
    NoDefaultExport,
    /// `meta.args` is not a usable JSON Schema (the whole message says why).
    Args(String),
}

impl fmt::Display for MetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaError::Script(e) => write!(f, "{e}"),
            MetaError::Missing => write!(
                f,
                "the graph has no meta export: add `export const meta = {{ name, slug, version, description }}`"
            ),
            MetaError::Invalid(e) => write!(f, "invalid meta: {e}"),
            MetaError::NoDefaultExport => f.write_str(NO_DEFAULT_EXPORT),
            MetaError::Args(e) => write!(f, "invalid meta: {e}"),
        }
    }
}

impl std::error::Error for MetaError {}

impl Meta {
    /// Validates a `meta` value read from a module.
    pub fn from_json(value: serde_json::Value) -> Result<Self, MetaError> {
        let serde_json::Value::Object(map) = value else {
            return Err(MetaError::Invalid("meta must be an object".to_owned()));
        };
        for key in map.keys() {
            if !matches!(
                key.as_str(),
                "name" | "slug" | "version" | "description" | "args"
            ) {
                return Err(MetaError::Invalid(format!(
                    "unknown field `{key}`; meta has name, slug, version, description and args"
                )));
            }
        }
        let field = |key: &str, required: bool, max: usize| -> Result<String, MetaError> {
            match map.get(key) {
                None | Some(serde_json::Value::Null) if !required => Ok(String::new()),
                None | Some(serde_json::Value::Null) => {
                    Err(MetaError::Invalid(format!("meta.{key} is missing")))
                }
                Some(serde_json::Value::String(s)) => {
                    if required && s.trim().is_empty() {
                        return Err(MetaError::Invalid(format!("meta.{key} is empty")));
                    }
                    if s.chars().count() > max {
                        return Err(MetaError::Invalid(format!(
                            "meta.{key} is longer than {max} characters"
                        )));
                    }
                    Ok(s.clone())
                }
                Some(_) => Err(MetaError::Invalid(format!("meta.{key} must be a string"))),
            }
        };
        let meta = Meta {
            name: field("name", true, MAX_NAME_CHARS)?,
            slug: field("slug", true, MAX_SLUG_CHARS)?,
            version: field("version", true, MAX_VERSION_CHARS)?,
            description: field("description", false, MAX_DESCRIPTION_CHARS)?,
            args: match map.get("args") {
                None | Some(serde_json::Value::Null) => None,
                Some(schema @ serde_json::Value::Object(_)) => Some(schema.clone()),
                Some(_) => {
                    return Err(MetaError::Args(
                        "meta.args must be a JSON Schema object, like { type: \"object\", properties: { ... } }"
                            .to_owned(),
                    ));
                }
            },
        };
        if !is_valid_slug(&meta.slug) {
            return Err(MetaError::Invalid(format!(
                "meta.slug `{}` must start with a lowercase letter or digit and contain only a-z, 0-9, `-` and `_`",
                meta.slug
            )));
        }
        Ok(meta)
    }
}

/// Whether `slug` is a valid graph slug: `[a-z0-9][a-z0-9_-]{0,63}`.
pub fn is_valid_slug(slug: &str) -> bool {
    let mut chars = slug.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    slug.len() <= MAX_SLUG_CHARS
        && (first.is_ascii_lowercase() || first.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}
