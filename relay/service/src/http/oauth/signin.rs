//! The owner's sign-in: a password form or a one-time link, a server-side session behind an
//! HttpOnly cookie, CSRF tokens, and a throttle on failed attempts.
//!
//! Forms shown before anyone is signed in carry a double-submit CSRF token (a random cookie
//! the form must repeat); forms of a signed-in browser carry the session's own token. Failed
//! sign-ins slow down per account from each client address, and per client address,
//! exponentially up to [`MAX_THROTTLE_DELAY`]. No key counts an account's failures alone: an
//! attacker who knows an owner's name and guesses from many addresses would then hold the
//! owner's own sign-in shut (issue 44), so the owner signing in from an address that has not
//! failed is never throttled.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use relay_protocol::clock::Timestamp;
use serde::Deserialize;

use super::pages::{self, SignInView};
use super::{BROWSER_SESSION_IDLE, SIGN_IN_LINK_PATH, SIGN_IN_PATH, base_url};
use crate::auth::{hash_token, hex};
use crate::http::AppState;
use crate::http::answers;
use crate::http::request_log::Refusal;
use crate::oauth::{password, same_secret};
use crate::store::{BrowserSessionRecord, OwnerRecord, StoreError};

/// Failed attempts allowed before the throttle starts.
pub const FREE_FAILURES: u32 = 5;
/// The longest a throttled account or address waits before its next attempt.
pub const MAX_THROTTLE_DELAY: Duration = Duration::from_secs(60);
/// A quiet spell this long forgets earlier failures.
const FAILURE_MEMORY: Duration = Duration::from_secs(15 * 60);
/// Accounts and addresses the throttle remembers at most (past it, finished waits are dropped).
const MAX_THROTTLE_ENTRIES: usize = 10_000;
/// Longest owner name or `return_to` a form may carry (an authorization request is ≤ 8 KiB).
const MAX_FIELD_CHARS: usize = 10 * 1024;

/// The name of a cookie: `__Host-` prefixed when the public URL is https.
pub fn cookie_name(base: &str, name: &str) -> String {
    if base.starts_with("https://") {
        format!("__Host-graphrelay_{name}")
    } else {
        format!("graphrelay_{name}")
    }
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Lax, path `/`, Secure on https.
fn set_cookie(base: &str, name: &str, value: &str, max_age: Duration) -> Option<HeaderValue> {
    let secure = if base.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        cookie_name(base, name),
        max_age.as_secs()
    ))
    .ok()
}

/// The value of the cookie `name` in the request, if it sent one.
pub fn cookie(headers: &HeaderMap, base: &str, name: &str) -> Option<String> {
    let wanted = cookie_name(base, name);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == wanted)
        .map(|(_, value)| value.to_owned())
        .filter(|value| !value.is_empty() && value.len() <= 256)
}

/// `bytes` random bytes as hex.
pub fn random_hex(bytes: usize) -> Result<String, StoreError> {
    let mut secret = vec![0u8; bytes];
    getrandom::fill(&mut secret).map_err(StoreError::Randomness)?;
    Ok(hex(&secret))
}

/// The signed-in owner of this browser, if any; the session counts as used now.
pub async fn signed_in(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(BrowserSessionRecord, OwnerRecord)>, StoreError> {
    let base = base_url(app, headers);
    let Some(secret) = cookie(headers, &base, "session") else {
        return Ok(None);
    };
    let now = app.clock.now();
    let idle_before = now.saturating_sub(BROWSER_SESSION_IDLE);
    let Some(session) = app
        .store
        .touch_browser_session(&hash_token(&secret), idle_before, now)
        .await?
    else {
        return Ok(None);
    };
    let owner = app.store.owner(&session.owner_id).await?;
    Ok(owner.map(|owner| (session, owner)))
}

/// Starts a browser session for `owner_id`: the `Set-Cookie` that carries it.
async fn start_session(
    app: &AppState,
    base: &str,
    owner_id: &str,
) -> Result<Option<HeaderValue>, StoreError> {
    let secret = format!("grs_{}", random_hex(32)?);
    let now = app.clock.now();
    app.store
        .insert_browser_session(BrowserSessionRecord {
            id_hash: hash_token(&secret),
            owner_id: owner_id.to_owned(),
            csrf: random_hex(16)?,
            created_at: now,
            last_seen_at: now,
            ended_at: None,
        })
        .await?;
    Ok(set_cookie(base, "session", &secret, BROWSER_SESSION_IDLE))
}

/// The pre-session CSRF token: the request's cookie, or a new one with the cookie that sets it.
pub fn form_csrf(
    headers: &HeaderMap,
    base: &str,
) -> Result<(String, Option<HeaderValue>), StoreError> {
    if let Some(existing) = cookie(headers, base, "csrf") {
        return Ok((existing, None));
    }
    let fresh = random_hex(16)?;
    let header = set_cookie(base, "csrf", &fresh, BROWSER_SESSION_IDLE);
    Ok((fresh, header))
}

/// Whether a pre-session form's token matches its cookie.
fn form_csrf_matches(headers: &HeaderMap, base: &str, posted: &str) -> bool {
    cookie(headers, base, "csrf").is_some_and(|expected| same_secret(&expected, posted))
}

/// The answer to a form whose CSRF token is missing or wrong.
pub fn csrf_refused() -> Response {
    pages::message(
        StatusCode::FORBIDDEN,
        "Form expired",
        "This form's security token is missing or does not match this browser. Go back, reload the page and send it again.",
    )
}

/// The sign-in page; a successful sign-in returns to `return_to` (a path of this service).
pub fn sign_in_page(
    app: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    return_to: &str,
    username: &str,
    error: Option<&str>,
) -> Response {
    let base = base_url(app, headers);
    let (csrf, set) = match form_csrf(headers, &base) {
        Ok(pair) => pair,
        Err(error) => return unavailable(&error),
    };
    let action = format!("{base}{SIGN_IN_PATH}");
    let mut response = pages::sign_in(
        status,
        &SignInView {
            action: &action,
            csrf: &csrf,
            return_to,
            error,
            username,
        },
    );
    if let Some(set) = set {
        response.headers_mut().append(header::SET_COOKIE, set);
    }
    response
}

/// The page for a store failure: its status, text and `Retry-After` as the APIs answer it.
pub fn unavailable(error: &StoreError) -> Response {
    let answer = answers::store_answer(error, "sign-in or authorization failed");
    let (title, text) = answers::for_person(&answer);
    answers::with_retry_after(pages::message(answer.status, title, &text), &answer)
}

/// The sign-in form's fields.
#[derive(Debug, Deserialize)]
pub struct SignInForm {
    csrf: Option<String>,
    return_to: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// The TCP peer of the request, if the listener recorded it (in-process calls have none).
pub struct Peer(pub Option<SocketAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| *addr),
        ))
    }
}

/// The address a request came from (the proxy's view with `--trust-proxy`).
pub fn client_ip(app: &AppState, headers: &HeaderMap, peer: Option<SocketAddr>) -> Option<IpAddr> {
    crate::http::origin::client_address(&app.config, headers, peer)
}

/// `POST /oauth/sign-in`.
pub async fn sign_in(
    State(app): State<Arc<AppState>>,
    Peer(peer): Peer,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignInForm>,
) -> Response {
    let base = base_url(&app, &headers);
    let return_to = form.return_to.unwrap_or_default();
    let username = form.username.unwrap_or_default();
    if !form_csrf_matches(&headers, &base, form.csrf.as_deref().unwrap_or_default()) {
        return csrf_refused();
    }
    if username.len() > MAX_FIELD_CHARS || return_to.len() > MAX_FIELD_CHARS {
        return pages::message(StatusCode::BAD_REQUEST, "Sign in", "The form is too large.");
    }
    let address = client_ip(&app, &headers, peer);
    let keys = throttle_keys(&username, address);
    let now = app.clock.now();
    if let Err(wait) = app.oauth.throttle.check(&keys, now) {
        return throttled(&app, &headers, &return_to, &username, wait);
    }
    let owner = match check_password(&app, &username, form.password.unwrap_or_default()).await {
        Ok(owner) => owner,
        Err(error) => return unavailable(&error),
    };
    let Some(owner) = owner else {
        app.oauth.throttle.fail(&keys, app.clock.now());
        return Refusal::SIGN_IN_FAILED.mark(sign_in_page(
            &app,
            &headers,
            StatusCode::UNAUTHORIZED,
            &return_to,
            &username,
            Some("Wrong owner name or password."),
        ));
    };
    app.oauth.throttle.succeed(&keys[..1]);
    let cookie = match start_session(&app, &base, &owner.id).await {
        Ok(cookie) => cookie,
        Err(error) => return unavailable(&error),
    };
    let mut response = after_sign_in(&base, &return_to, &owner.name);
    if let Some(cookie) = cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// Where a browser goes once signed in: back to the page that asked (`return_to`, a path of
/// this service such as `/oauth/authorize?…`), else a note.
fn after_sign_in(base: &str, return_to: &str, owner_name: &str) -> Response {
    if is_local_path(return_to) {
        Redirect::to(&format!("{base}{return_to}")).into_response()
    } else {
        pages::message(
            StatusCode::OK,
            "Signed in",
            &format!(
                "You are signed in as {owner_name}. Go back to the chat app's authorization page and reload it."
            ),
        )
    }
}

/// Whether `path` is a path of this service (so a sign-in cannot redirect anywhere else).
pub fn is_local_path(path: &str) -> bool {
    path.starts_with('/')
        && !path.starts_with("//")
        && path
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'#' && b != b'\\')
}

fn throttled(
    app: &AppState,
    headers: &HeaderMap,
    return_to: &str,
    username: &str,
    wait: Duration,
) -> Response {
    let seconds = wait.as_secs_f64().ceil().max(1.0);
    let message = format!("Too many failed sign-ins. Wait {seconds:.0} s and try again.");
    let mut response = sign_in_page(
        app,
        headers,
        StatusCode::TOO_MANY_REQUESTS,
        return_to,
        username,
        Some(&message),
    );
    if let Ok(value) = HeaderValue::from_str(&format!("{seconds:.0}")) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    Refusal::SIGN_IN_THROTTLED.mark(response)
}

/// A hash no password matches, checked when the account is unknown so that a wrong name
/// takes as long as a wrong password.
async fn decoy_hash() -> Option<String> {
    static DECOY: OnceLock<String> = OnceLock::new();
    if let Some(hash) = DECOY.get() {
        return Some(hash.clone());
    }
    let hash = password::hash(random_hex(16).ok()?).await.ok()?;
    Some(DECOY.get_or_init(|| hash).clone())
}

/// The owner named `username` if `password` is theirs.
async fn check_password(
    app: &AppState,
    username: &str,
    password: String,
) -> Result<Option<OwnerRecord>, StoreError> {
    let owner = app.store.owner_by_name(username).await?;
    let stored = match &owner {
        Some(owner) => app.store.owner_password(&owner.id).await?,
        None => None,
    };
    let Some(stored) = stored else {
        if let Some(decoy) = decoy_hash().await {
            password::verify(password, decoy).await;
        }
        return Ok(None);
    };
    Ok(password::verify(password, stored)
        .await
        .then_some(owner)
        .flatten())
}

/// `?link=` of a sign-in link.
#[derive(Debug, Deserialize)]
pub struct LinkQuery {
    link: Option<String>,
}

/// `GET /oauth/sign-in/link?link=…`: a page with one button (nothing is used by a GET).
pub async fn link_page(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<LinkQuery>,
) -> Response {
    let base = base_url(&app, &headers);
    let link = query.link.unwrap_or_default();
    if link.is_empty() || link.len() > 256 {
        return pages::message(
            StatusCode::BAD_REQUEST,
            "Sign in with a link",
            "This link is incomplete. Ask the operator for a new one.",
        );
    }
    let (csrf, set) = match form_csrf(&headers, &base) {
        Ok(pair) => pair,
        Err(error) => return unavailable(&error),
    };
    let mut response = pages::link(&format!("{base}{SIGN_IN_LINK_PATH}"), &csrf, &link);
    if let Some(set) = set {
        response.headers_mut().append(header::SET_COOKIE, set);
    }
    response
}

/// The sign-in link form's fields.
#[derive(Debug, Deserialize)]
pub struct LinkForm {
    csrf: Option<String>,
    link: Option<String>,
}

/// `POST /oauth/sign-in/link`: uses the link once and signs its owner in.
pub async fn use_link(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LinkForm>,
) -> Response {
    let base = base_url(&app, &headers);
    if !form_csrf_matches(&headers, &base, form.csrf.as_deref().unwrap_or_default()) {
        return csrf_refused();
    }
    let link = form.link.unwrap_or_default();
    let used = match app
        .store
        .use_sign_in_link(&hash_token(&link), app.clock.now())
        .await
    {
        Ok(used) => used,
        Err(error) => return unavailable(&error),
    };
    let Some(used) = used else {
        return pages::message(
            StatusCode::GONE,
            "Sign in with a link",
            "This link was used already or has expired. Ask the operator for a new one: relay admin owner sign-in-link NAME.",
        );
    };
    let owner = match app.store.owner(&used.owner_id).await {
        Ok(owner) => owner,
        Err(error) => return unavailable(&error),
    };
    let Some(owner) = owner else {
        return pages::message(
            StatusCode::GONE,
            "Sign in with a link",
            "This owner no longer exists.",
        );
    };
    let cookie = match start_session(&app, &base, &owner.id).await {
        Ok(cookie) => cookie,
        Err(error) => return unavailable(&error),
    };
    let mut response = after_sign_in(&base, "", &owner.name);
    if let Some(cookie) = cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// What the throttle counts failures against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ThrottleKey {
    /// The owner name typed, from one client address (none for in-process calls).
    AccountFrom(String, Option<IpAddr>),
    /// The client address, whatever name it typed.
    Address(IpAddr),
}

/// The keys of one attempt: the account from this address first (the one a success clears),
/// then the address.
fn throttle_keys(username: &str, address: Option<IpAddr>) -> Vec<ThrottleKey> {
    let address = address.map(throttle_address);
    let mut keys = vec![ThrottleKey::AccountFrom(username.to_owned(), address)];
    keys.extend(address.map(ThrottleKey::Address));
    keys
}

/// The address a failure counts against: an IPv6 client's /64, since one host usually holds a
/// whole /64 and could otherwise guess from a fresh address each time; an IPv4 client's own.
fn throttle_address(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
        v4 @ IpAddr::V4(_) => v4,
    }
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Timestamp,
    wait_until: Timestamp,
}

/// Failed sign-ins per account and address, and per address.
#[derive(Debug, Default)]
pub struct Throttle {
    failures: Mutex<HashMap<ThrottleKey, Failures>>,
}

impl Throttle {
    /// `Ok` if every key may try now, else how long the longest wait still is.
    pub fn check(&self, keys: &[ThrottleKey], now: Timestamp) -> Result<(), Duration> {
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let wait = keys
            .iter()
            .filter_map(|key| failures.get(key))
            .map(|f| f.wait_until.saturating_duration_since(now))
            .max()
            .unwrap_or_default();
        if wait.is_zero() { Ok(()) } else { Err(wait) }
    }

    /// Counts a failure against every key; past [`FREE_FAILURES`], each one doubles the wait.
    pub fn fail(&self, keys: &[ThrottleKey], now: Timestamp) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_THROTTLE_ENTRIES {
            failures.retain(|_, f| {
                f.wait_until > now || now.saturating_duration_since(f.last) < FAILURE_MEMORY
            });
            if failures.len() >= MAX_THROTTLE_ENTRIES {
                failures.clear();
            }
        }
        for key in keys {
            let entry = failures.entry(key.clone()).or_insert(Failures {
                count: 0,
                last: now,
                wait_until: now,
            });
            if now.saturating_duration_since(entry.last) >= FAILURE_MEMORY {
                entry.count = 0;
            }
            entry.count = entry.count.saturating_add(1);
            entry.last = now;
            if entry.count > FREE_FAILURES {
                let doublings = (entry.count - FREE_FAILURES - 1).min(16);
                let delay = Duration::from_secs(1 << doublings).min(MAX_THROTTLE_DELAY);
                entry.wait_until = now.saturating_add(delay);
            }
        }
    }

    /// Forgets the failures of `keys` (a successful sign-in clears its account).
    pub fn succeed(&self, keys: &[ThrottleKey]) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            failures.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_doubles_up_to_its_cap_and_forgets_on_success() {
        let throttle = Throttle::default();
        let t0 = Timestamp::from_unix_millis(1_000_000);
        let keys = throttle_keys("ann", Some(IpAddr::from([10, 0, 0, 1])));
        for _ in 0..FREE_FAILURES {
            assert!(throttle.check(&keys, t0).is_ok());
            throttle.fail(&keys, t0);
        }
        assert!(throttle.check(&keys, t0).is_ok(), "five failures are free");
        throttle.fail(&keys, t0);
        assert_eq!(throttle.check(&keys, t0), Err(Duration::from_secs(1)));
        throttle.fail(&keys, t0);
        assert_eq!(throttle.check(&keys, t0), Err(Duration::from_secs(2)));
        for _ in 0..20 {
            throttle.fail(&keys, t0);
        }
        assert_eq!(throttle.check(&keys, t0), Err(MAX_THROTTLE_DELAY));
        let later = t0.saturating_add(MAX_THROTTLE_DELAY);
        assert!(throttle.check(&keys, later).is_ok(), "the wait ends");
        let other = throttle_keys("bob", Some(IpAddr::from([10, 0, 0, 2])));
        assert!(throttle.check(&other, t0).is_ok(), "others are not slowed");
        throttle.succeed(&keys);
        assert!(throttle.check(&keys, t0).is_ok());
    }

    #[test]
    fn guesses_from_other_addresses_do_not_slow_the_owner_but_one_ipv6_net_counts_once() {
        let throttle = Throttle::default();
        let t0 = Timestamp::from_unix_millis(1_000_000);
        for n in 0..50u8 {
            throttle.fail(&throttle_keys("bob", Some(IpAddr::from([10, 0, 1, n]))), t0);
        }
        let owner = throttle_keys("bob", Some(IpAddr::from([10, 0, 2, 1])));
        assert!(throttle.check(&owner, t0).is_ok(), "a clean address");
        let net: std::net::Ipv6Addr = "2001:db8:1:2::".parse().expect("ip");
        for n in 0..=FREE_FAILURES {
            let mut segments = net.segments();
            segments[7] = u16::try_from(n).expect("small");
            throttle.fail(&throttle_keys("bob", Some(IpAddr::V6(segments.into()))), t0);
        }
        let neighbour = throttle_keys("ann", Some("2001:db8:1:2::ffff".parse().expect("ip")));
        assert!(
            throttle.check(&neighbour, t0).is_err(),
            "a fresh address in the same /64 is the same client"
        );
        let mapped = throttle_keys("ann", Some("::ffff:10.0.2.1".parse().expect("ip")));
        assert_eq!(
            mapped,
            throttle_keys("ann", Some(IpAddr::from([10, 0, 2, 1])))
        );
    }

    #[test]
    fn cookies_are_found_by_name_and_prefixed_on_https() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; graphrelay_session=abc; __Host-graphrelay_session=def"),
        );
        assert_eq!(
            cookie(&headers, "http://x", "session").as_deref(),
            Some("abc")
        );
        assert_eq!(
            cookie(&headers, "https://x", "session").as_deref(),
            Some("def")
        );
        assert_eq!(cookie(&headers, "http://x", "csrf"), None);
        let set = set_cookie("https://x", "session", "v", BROWSER_SESSION_IDLE).expect("header");
        let set = set.to_str().expect("text");
        assert!(set.starts_with("__Host-graphrelay_session=v; Path=/; HttpOnly; SameSite=Lax"));
        assert!(set.ends_with("; Secure"));
        assert!(
            !set_cookie("http://x", "s", "v", BROWSER_SESSION_IDLE)
                .expect("header")
                .to_str()
                .expect("text")
                .contains("Secure")
        );
    }

    #[test]
    fn only_local_paths_are_returned_to() {
        assert!(is_local_path("/oauth/authorize?client_id=a"));
        assert!(is_local_path("/console"));
        for bad in [
            "",
            "https://evil.example/",
            "//evil.example/",
            "/\\evil.example",
            "/a b",
            "console",
        ] {
            assert!(!is_local_path(bad), "{bad}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", "a"));
    }
}
