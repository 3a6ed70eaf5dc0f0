//! The `meta` export every graph carries: name, slug, version, description.

use std::fmt;

/// Longest accepted `meta.name`, in characters.
pub const MAX_NAME_CHARS: usize = 200;
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
            MetaError::NoDefaultExport => {
                write!(f, "{}", crate::ScriptError::NoDefaultExport)
            }
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
            if !matches!(key.as_str(), "name" | "slug" | "version" | "description") {
                return Err(MetaError::Invalid(format!(
                    "unknown field `{key}`; meta has name, slug, version and description"
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
