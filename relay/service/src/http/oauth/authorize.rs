//! `/oauth/authorize`: the authorization request, the sign-in it may need, the consent form and
//! the code it issues.
//!
//! Until the client and its redirect URI are known good, a refusal is a page in the owner's
//! browser and never a redirect (an open redirector would send codes or errors anywhere); after
//! that, refusals go back to the client as `error=` on its redirect URI (RFC 6749 §4.1.2.1).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use url::Url;

use super::pages::{self, ConsentView};
use super::signin::{self, Peer, csrf_refused, random_hex, sign_in_page, unavailable};
use super::{AUTHORIZE_PATH, CODE_TTL, base_url, resource_url};
use crate::auth::{Scope, hash_token};
use crate::http::AppState;
use crate::oauth::cimd::DocumentError;
use crate::oauth::clients::{self, ClientError};
use crate::oauth::metadata::{Client, redirect_matches};
use crate::oauth::same_secret;
use crate::store::{AuthCodeRecord, BrowserSessionRecord, OwnerRecord, StoreError};

/// Longest authorization request query accepted.
const MAX_QUERY_BYTES: usize = 8 * 1024;

/// A checked authorization request.
#[derive(Debug, Clone)]
pub struct AuthorizeRequest {
    /// The client.
    pub client: Client,
    /// Where the answer goes (one of the client's, exactly, loopback port aside).
    pub redirect_uri: String,
    /// Echoed back.
    pub state: Option<String>,
    /// The PKCE S256 challenge.
    pub code_challenge: String,
    /// What the client asks for.
    pub scopes: Vec<Scope>,
    /// The RFC 8707 resource, when the client named it.
    pub resource: Option<String>,
}

/// Why an authorization request is refused.
pub enum Refusal {
    /// Shown in the browser: the client or redirect URI cannot be trusted.
    Page(Box<Response>),
    /// Sent back to the client's redirect URI.
    Redirect {
        /// The checked redirect URI.
        redirect_uri: String,
        /// The request's state.
        state: Option<String>,
        /// The RFC 6749 error code.
        error: &'static str,
        /// What was wrong.
        description: String,
    },
}

/// The page for an address that has caused too many metadata document fetches: 429 with
/// `Retry-After`.
fn too_many_fetches(error: &DocumentError) -> Refusal {
    let mut page = pages::message(
        StatusCode::TOO_MANY_REQUESTS,
        "This authorization request cannot be used now",
        &format!("The client metadata document {error}."),
    );
    if let DocumentError::TooManyFetches { retry_after_secs } = error
        && let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string())
    {
        page.headers_mut().insert(header::RETRY_AFTER, value);
    }
    Refusal::Page(Box::new(page))
}

fn page_refusal(text: &str) -> Refusal {
    Refusal::Page(Box::new(pages::message(
        StatusCode::BAD_REQUEST,
        "This authorization request cannot be used",
        text,
    )))
}

/// Why an authorization request's query cannot be read (shown on the refusal page).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum QueryError {
    /// The query is longer than [`MAX_QUERY_BYTES`].
    #[error("the request is longer than {MAX_QUERY_BYTES} bytes")]
    TooLong,
    /// A parameter is given twice (RFC 6749 §3.1: it may appear at most once).
    #[error("the parameter `{0}` appears more than once")]
    Repeated(String),
}

fn parse_query(raw: &str) -> Result<HashMap<String, String>, QueryError> {
    if raw.len() > MAX_QUERY_BYTES {
        return Err(QueryError::TooLong);
    }
    let mut params = HashMap::new();
    for (key, value) in url::form_urlencoded::parse(raw.as_bytes()) {
        if params.insert(key.to_string(), value.into_owned()).is_some() {
            return Err(QueryError::Repeated(key.into_owned()));
        }
    }
    Ok(params)
}

type Params = HashMap<String, String>;

fn param<'a>(params: &'a Params, name: &str) -> Option<&'a str> {
    params
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// Checks an authorization request given as its query string.
pub async fn check(
    app: &AppState,
    base: &str,
    raw: &str,
    requester: Option<IpAddr>,
) -> Result<AuthorizeRequest, Refusal> {
    let params = parse_query(raw).map_err(|e| page_refusal(&e.to_string()))?;
    let (client, redirect_uri) = client_and_redirect(app, &params, requester).await?;
    let state = param(&params, "state").map(str::to_owned);
    match check_parameters(&params, base) {
        Ok((code_challenge, scopes, resource)) => Ok(AuthorizeRequest {
            client,
            redirect_uri,
            state,
            code_challenge,
            scopes,
            resource,
        }),
        Err(refused) => Err(Refusal::Redirect {
            redirect_uri,
            state,
            error: refused.code(),
            description: refused.to_string(),
        }),
    }
}

/// The client and the redirect URI, or a page: nothing may be redirected before both are good.
async fn client_and_redirect(
    app: &AppState,
    params: &Params,
    requester: Option<IpAddr>,
) -> Result<(Client, String), Refusal> {
    let client_id = param(params, "client_id").ok_or_else(|| {
        page_refusal(
            "The request names no client_id. Start the connection again from the chat app.",
        )
    })?;
    let client = match clients::client(&app.clients, client_id, requester).await {
        Ok(client) => client,
        Err(ClientError::Store(error)) => return Err(Refusal::Page(Box::new(unavailable(&error)))),
        Err(ClientError::Document { source, .. })
            if matches!(*source, DocumentError::TooManyFetches { .. }) =>
        {
            return Err(too_many_fetches(&source));
        }
        Err(refused) => return Err(page_refusal(&refused.to_string())),
    };
    let redirect_uri = match param(params, "redirect_uri") {
        Some(uri) => uri.to_owned(),
        None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
        None => {
            return Err(page_refusal(
                "The request names no redirect_uri and the client registered several.",
            ));
        }
    };
    if !client
        .redirect_uris
        .iter()
        .any(|registered| redirect_matches(registered, &redirect_uri))
    {
        return Err(page_refusal(&format!(
            "The redirect URI `{redirect_uri}` is not one that {} registered. Nothing was sent to it.",
            client.name
        )));
    }
    Ok((client, redirect_uri))
}

/// What a checked request asks for: the PKCE challenge, the scopes and the resource.
type Asked = (String, Vec<Scope>, Option<String>);

/// Why an authorization request is refused once its client and redirect URI are known good:
/// answered on the redirect URI as RFC 6749 §4.1.2.1's `error` ([`AuthorizeError::code`]) and
/// `error_description` (the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum AuthorizeError {
    /// Not the code flow.
    #[error("response_type must be `code`")]
    ResponseType,
    /// No PKCE challenge.
    #[error("code_challenge is required (PKCE with S256)")]
    NoChallenge,
    /// A PKCE method other than S256.
    #[error("code_challenge_method must be S256 (plain is refused)")]
    ChallengeMethod,
    /// A challenge that is not a base64url SHA-256.
    #[error("code_challenge must be the 43-character base64url SHA-256 of the verifier")]
    BadChallenge,
    /// A scope this server does not offer.
    #[error("scope `{0}` is not offered: osfoundry:read and osfoundry:run are")]
    Scope(String),
    /// A resource other than this MCP endpoint (named here).
    #[error("this server issues tokens for {0} only")]
    Target(String),
}

impl AuthorizeError {
    /// The RFC 6749 (and RFC 8707) error code.
    fn code(&self) -> &'static str {
        match self {
            AuthorizeError::ResponseType => "unsupported_response_type",
            AuthorizeError::NoChallenge
            | AuthorizeError::ChallengeMethod
            | AuthorizeError::BadChallenge => "invalid_request",
            AuthorizeError::Scope(_) => "invalid_scope",
            AuthorizeError::Target(_) => "invalid_target",
        }
    }
}

/// The rest of the request, or why it is refused.
fn check_parameters(params: &Params, base: &str) -> Result<Asked, AuthorizeError> {
    if param(params, "response_type") != Some("code") {
        return Err(AuthorizeError::ResponseType);
    }
    let Some(code_challenge) = param(params, "code_challenge") else {
        return Err(AuthorizeError::NoChallenge);
    };
    if param(params, "code_challenge_method") != Some("S256") {
        return Err(AuthorizeError::ChallengeMethod);
    }
    if code_challenge.len() != 43
        || !code_challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(AuthorizeError::BadChallenge);
    }
    let scopes = requested_scopes(param(params, "scope"))?;
    let resource = param(params, "resource").map(str::to_owned);
    if let Some(resource) = &resource
        && !same_resource(resource, &resource_url(base))
    {
        return Err(AuthorizeError::Target(resource_url(base)));
    }
    Ok((code_challenge.to_owned(), scopes, resource))
}

/// The scopes a request names (both when it names none).
fn requested_scopes(text: Option<&str>) -> Result<Vec<Scope>, AuthorizeError> {
    let mut scopes = Vec::new();
    for word in text.unwrap_or_default().split_whitespace() {
        let scope = Scope::parse(word).ok_or_else(|| AuthorizeError::Scope(word.to_owned()))?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    Ok(if scopes.is_empty() {
        Scope::ALL.to_vec()
    } else {
        scopes
    })
}

/// Whether a client's `resource` names this MCP endpoint (a trailing slash aside).
pub fn same_resource(given: &str, ours: &str) -> bool {
    given.trim_end_matches('/') == ours.trim_end_matches('/')
}

/// A 303 to the client's redirect URI with `pairs` added to its query.
fn redirect_with(redirect_uri: &str, pairs: &[(&str, &str)]) -> Response {
    let Ok(mut url) = Url::parse(redirect_uri) else {
        return pages::message(
            StatusCode::BAD_REQUEST,
            "Authorization",
            "The redirect URI is invalid.",
        );
    };
    {
        let mut query = url.query_pairs_mut();
        for (key, value) in pairs {
            query.append_pair(key, value);
        }
    }
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(url.as_str()) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn refusal_response(base: &str, refusal: Refusal) -> Response {
    match refusal {
        Refusal::Page(page) => *page,
        Refusal::Redirect {
            redirect_uri,
            state,
            error,
            description,
        } => {
            let mut pairs = vec![
                ("error", error),
                ("error_description", description.as_str()),
            ];
            if let Some(state) = &state {
                pairs.push(("state", state));
            }
            pairs.push(("iss", base));
            redirect_with(&redirect_uri, &pairs)
        }
    }
}

/// The signed-in owner's projects: (id, name), oldest first.
async fn owner_projects(
    app: &AppState,
    owner_id: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    Ok(app
        .store
        .projects_of_owner(owner_id)
        .await?
        .into_iter()
        .map(|p| (p.id, p.name))
        .collect())
}

/// `GET /oauth/authorize`: the sign-in page, or the consent page once signed in.
pub async fn authorize_page(
    State(app): State<Arc<AppState>>,
    Peer(peer): Peer,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let base = base_url(&app, &headers);
    let raw = query.unwrap_or_default();
    let requester = signin::client_ip(&app, &headers, peer);
    let request = match check(&app, &base, &raw, requester).await {
        Ok(request) => request,
        Err(refusal) => return refusal_response(&base, refusal),
    };
    let signed_in = match signin::signed_in(&app, &headers).await {
        Ok(signed_in) => signed_in,
        Err(error) => return unavailable(&error),
    };
    let Some((session, owner)) = signed_in else {
        let return_to = format!("{AUTHORIZE_PATH}?{raw}");
        return sign_in_page(&app, &headers, StatusCode::OK, &return_to, "", None);
    };
    consent_page(&app, &base, &raw, &request, &session, &owner).await
}

async fn consent_page(
    app: &AppState,
    base: &str,
    raw: &str,
    request: &AuthorizeRequest,
    session: &BrowserSessionRecord,
    owner: &OwnerRecord,
) -> Response {
    let projects = match owner_projects(app, &owner.id).await {
        Ok(projects) => projects,
        Err(error) => return unavailable(&error),
    };
    if projects.is_empty() {
        return pages::message(
            StatusCode::OK,
            "No project to connect",
            &format!(
                "{} has no project yet. The operator makes one with `relay admin project create NAME --owner {}`; then reload this page.",
                owner.name, owner.name
            ),
        );
    }
    let redirect_host = Url::parse(&request.redirect_uri)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default();
    pages::consent(&ConsentView {
        action: &format!("{base}{AUTHORIZE_PATH}"),
        csrf: &session.csrf,
        authorization: raw,
        client_name: &request.client.name,
        redirect_host: &redirect_host,
        owner_name: &owner.name,
        projects: &projects,
        scopes: &request.scopes,
    })
}

/// The consent form's fields (`scope` repeats, so it is read by hand).
#[derive(Debug, Default)]
struct ConsentForm {
    csrf: String,
    authorization: String,
    project: String,
    scopes: Vec<String>,
    decision: String,
}

fn consent_form(body: &[u8]) -> ConsentForm {
    let mut form = ConsentForm::default();
    for (key, value) in url::form_urlencoded::parse(body) {
        let value = value.into_owned();
        match key.as_ref() {
            "csrf" => form.csrf = value,
            "authorization" => form.authorization = value,
            "project" => form.project = value,
            "scope" => form.scopes.push(value),
            "decision" => form.decision = value,
            _ => {}
        }
    }
    form
}

/// `POST /oauth/authorize`: the owner's decision; allow issues a code to the redirect URI.
pub async fn consent(
    State(app): State<Arc<AppState>>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let base = base_url(&app, &headers);
    let form = consent_form(&body);
    let signed_in = match signin::signed_in(&app, &headers).await {
        Ok(signed_in) => signed_in,
        Err(error) => return unavailable(&error),
    };
    let Some((session, owner)) = signed_in else {
        return pages::message(
            StatusCode::FORBIDDEN,
            "Signed out",
            "This browser is not signed in any more. Go back and reload the authorization page to sign in again.",
        );
    };
    if form.csrf.is_empty() || !same_secret(&session.csrf, &form.csrf) {
        return csrf_refused();
    }
    let requester = signin::client_ip(&app, &headers, peer);
    let request = match check(&app, &base, &form.authorization, requester).await {
        Ok(request) => request,
        Err(refusal) => return refusal_response(&base, refusal),
    };
    let redirect = |error: &'static str, description: &str| {
        refusal_response(
            &base,
            Refusal::Redirect {
                redirect_uri: request.redirect_uri.clone(),
                state: request.state.clone(),
                error,
                description: description.to_owned(),
            },
        )
    };
    match form.decision.as_str() {
        "allow" => {}
        "deny" => return redirect("access_denied", "the owner denied the request"),
        _ => {
            return pages::message(
                StatusCode::BAD_REQUEST,
                "Connect a chat app",
                "Choose Allow or Deny.",
            );
        }
    }
    match grant_code(&app, &base, &request, &owner, &form).await {
        Ok(response) => response,
        Err(error) => unavailable(&error),
    }
}

/// The scopes the owner ticked, each one the app asked for, sorted; else the page saying what
/// was wrong.
fn chosen_scopes(
    request: &AuthorizeRequest,
    form: &ConsentForm,
) -> Result<Vec<Scope>, Box<Response>> {
    let mut scopes = Vec::new();
    for text in &form.scopes {
        match Scope::parse(text) {
            Some(scope) if request.scopes.contains(&scope) => {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
            _ => {
                return Err(Box::new(pages::message(
                    StatusCode::BAD_REQUEST,
                    "Connect a chat app",
                    &format!(
                        "`{text}` is not a permission this app asked for. Nothing was granted."
                    ),
                )));
            }
        }
    }
    if scopes.is_empty() {
        return Err(Box::new(pages::message(
            StatusCode::BAD_REQUEST,
            "Connect a chat app",
            "Choose at least one permission, or Deny. Go back to change it.",
        )));
    }
    scopes.sort();
    Ok(scopes)
}

async fn grant_code(
    app: &AppState,
    base: &str,
    request: &AuthorizeRequest,
    owner: &OwnerRecord,
    form: &ConsentForm,
) -> Result<Response, StoreError> {
    if app
        .store
        .project_of_owner(&owner.id, &form.project)
        .await?
        .is_none()
    {
        return Ok(pages::message(
            StatusCode::FORBIDDEN,
            "Not your project",
            "That project is not one of yours. Nothing was granted.",
        ));
    }
    let scopes = match chosen_scopes(request, form) {
        Ok(scopes) => scopes,
        Err(refusal) => return Ok(*refusal),
    };
    let code = format!("grac_{}", random_hex(32)?);
    let now = app.clock.now();
    app.store
        .insert_auth_code(AuthCodeRecord {
            code_hash: hash_token(&code),
            client_id: request.client.id.clone(),
            client_name: request.client.name.clone(),
            redirect_uri: request.redirect_uri.clone(),
            code_challenge: request.code_challenge.clone(),
            resource: request.resource.clone(),
            owner_id: owner.id.clone(),
            project_id: form.project.clone(),
            scopes: scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            created_at: now,
            expires_at: now.saturating_add(CODE_TTL),
            used_at: None,
            grant_id: None,
        })
        .await?;
    if request.client.registered {
        app.store
            .mark_oauth_client_used(&request.client.id, now)
            .await?;
    }
    let mut pairs = vec![("code", code.as_str())];
    if let Some(state) = &request.state {
        pairs.push(("state", state));
    }
    pairs.push(("iss", base));
    Ok(redirect_with(&request.redirect_uri, &pairs))
}
