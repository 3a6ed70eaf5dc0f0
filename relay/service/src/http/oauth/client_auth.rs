//! The client credentials of a token or revocation request, from HTTP Basic or the form body
//! (RFC 6749 §2.3.1); checking them is [`crate::oauth::clients::authenticate`].

use axum::http::{HeaderMap, header};
use base64::Engine;
use serde_json::{Map, Value};

use crate::oauth::clients::Presented;

/// Why the presented client credentials cannot be read (the `invalid_client` description).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// HTTP Basic's value is not base64 of UTF-8.
    #[error("the Basic credentials are not base64 of `id:secret`")]
    NotBase64,
    /// HTTP Basic's value has no `:` between id and secret.
    #[error("the Basic credentials are not `id:secret`")]
    NoColon,
    /// The id or secret is not valid form encoding.
    #[error("the Basic credentials are badly form-encoded")]
    BadEncoding,
    /// The body names another client than HTTP Basic.
    #[error("client_id differs between the body and HTTP Basic")]
    TwoIds,
}

/// Reads the client's credentials from HTTP Basic or the form.
pub fn presented(
    headers: &HeaderMap,
    form: &Map<String, Value>,
) -> Result<Presented, CredentialsError> {
    let field = |name: &str| form.get(name).and_then(Value::as_str).map(str::to_owned);
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .map(|(_, value)| value.trim().to_owned());
    let Some(basic) = basic else {
        return Ok(Presented {
            client_id: field("client_id"),
            client_secret: field("client_secret"),
        });
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(basic.as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or(CredentialsError::NotBase64)?;
    let (id, secret) = decoded.split_once(':').ok_or(CredentialsError::NoColon)?;
    let decode = |text: &str| percent_decode(text).ok_or(CredentialsError::BadEncoding);
    let id = decode(id)?;
    if field("client_id").is_some_and(|body| body != id) {
        return Err(CredentialsError::TwoIds);
    }
    Ok(Presented {
        client_id: Some(id),
        client_secret: Some(decode(secret)?),
    })
}

/// `application/x-www-form-urlencoded` decoding of one value (RFC 6749 §2.3.1).
fn percent_decode(text: &str) -> Option<String> {
    url::form_urlencoded::parse(format!("v={text}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn basic_credentials_are_decoded_and_must_agree_with_the_body() {
        let mut headers = HeaderMap::new();
        let encoded = base64::engine::general_purpose::STANDARD.encode("grc_1:s%3Acret");
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).expect("header"),
        );
        let got = presented(&headers, &Map::new()).expect("decoded");
        assert_eq!(got.client_id.as_deref(), Some("grc_1"));
        assert_eq!(got.client_secret.as_deref(), Some("s:cret"));
        let mut form = Map::new();
        form.insert("client_id".into(), Value::from("grc_2"));
        assert!(presented(&headers, &form).is_err());
    }
}
