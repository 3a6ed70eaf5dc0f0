//! An OAuth client and a cookie-keeping "browser" for the authorization server's tests: they
//! register, send the browser through sign-in and consent by posting the pages' own forms,
//! and exchange codes, exactly as a chat app and its owner would.

use std::collections::HashMap;
use std::sync::Mutex;

use relay_service::http::oauth::token::s256;
use serde_json::{Value, json};

/// One answer as a browser sees it.
#[derive(Debug, Clone)]
pub struct Page {
    /// HTTP status.
    pub status: u16,
    /// `Location`, for a redirect.
    pub location: Option<String>,
    /// `Retry-After` in seconds, when throttled.
    pub retry_after: Option<u64>,
    /// The headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body text.
    pub body: String,
}

impl Page {
    /// The `value` of the input named `name` (the pages render `name="…" value="…"`).
    pub fn input(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self.body.find(&marker)? + marker.len();
        let end = self.body[start..].find('"')?;
        Some(unescape(&self.body[start..start + end]))
    }

    /// The options of the page's `<select>`: (value, text).
    pub fn options(&self) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut rest = self.body.as_str();
        while let Some(start) = rest.find("<option value=\"") {
            rest = &rest[start + "<option value=\"".len()..];
            let Some(end) = rest.find('"') else { break };
            let value = unescape(&rest[..end]);
            let Some(open) = rest.find('>') else { break };
            let Some(close) = rest.find("</option>") else {
                break;
            };
            found.push((value, unescape(&rest[open + 1..close])));
            rest = &rest[close..];
        }
        found
    }

    /// A query parameter of the redirect's target.
    pub fn redirect_param(&self, name: &str) -> Option<String> {
        let location = self.location.as_deref()?;
        let url = reqwest::Url::parse(location).ok()?;
        url.query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// A browser: keeps cookies, follows nothing by itself.
pub struct Browser {
    http: reqwest::Client,
    cookies: Mutex<HashMap<String, String>>,
}

impl Default for Browser {
    fn default() -> Self {
        Self::new()
    }
}

impl Browser {
    /// A browser with no cookies.
    pub fn new() -> Self {
        Self::with_address(None)
    }

    /// A browser with no cookies whose connections come from `address` (any of 127.0.0.0/8
    /// reaches a loopback service), so a test can play many clients.
    pub fn from_address(address: std::net::IpAddr) -> Self {
        Self::with_address(Some(address))
    }

    fn with_address(address: Option<std::net::IpAddr>) -> Self {
        let builder = graphrelay_net::client_builder()
            .expect("HTTP client")
            .redirect(reqwest::redirect::Policy::none())
            .local_address(address);
        Browser {
            http: graphrelay_net::build(builder).expect("HTTP client"),
            cookies: Mutex::new(HashMap::new()),
        }
    }

    fn cookie_header(&self) -> String {
        let cookies = self.cookies.lock().expect("cookies");
        cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Forgets every cookie (another browser, or a signed-out one).
    pub fn clear_cookies(&self) {
        self.cookies.lock().expect("cookies").clear();
    }

    /// The cookie `name`, if set.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.cookies.lock().expect("cookies").get(name).cloned()
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Page {
        let response = request
            .header(reqwest::header::COOKIE, self.cookie_header())
            .send()
            .await
            .expect("request answered");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        {
            let mut cookies = self.cookies.lock().expect("cookies");
            for set in headers.get_all(reqwest::header::SET_COOKIE) {
                let text = set.to_str().unwrap_or_default();
                if let Some((name, rest)) = text.split_once('=') {
                    let value = rest.split(';').next().unwrap_or_default();
                    cookies.insert(name.to_owned(), value.to_owned());
                }
            }
        }
        let header = |name| {
            headers
                .get(name)
                .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        Page {
            status,
            location: header(reqwest::header::LOCATION),
            retry_after: header(reqwest::header::RETRY_AFTER).and_then(|v| v.parse().ok()),
            body: response.text().await.unwrap_or_default(),
            headers,
        }
    }

    /// GET `url`.
    pub async fn get(&self, url: &str) -> Page {
        self.send(self.http.get(url)).await
    }

    /// POST `pairs` as a form to `url`, with the Origin a browser on that page would send.
    pub async fn post_form(&self, url: &str, pairs: &[(&str, &str)]) -> Page {
        let body = form_body(pairs);
        let origin = reqwest::Url::parse(url)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default();
        self.send(
            self.http
                .post(url)
                .header(reqwest::header::ORIGIN, origin)
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(body),
        )
        .await
    }
}

/// A PKCE pair.
#[derive(Debug, Clone)]
pub struct Pkce {
    /// The secret the token request proves.
    pub verifier: String,
    /// Its S256 challenge.
    pub challenge: String,
}

/// A fresh PKCE pair.
pub fn pkce() -> Pkce {
    let verifier = relay_service::auth::random_hex(32).expect("randomness");
    Pkce {
        challenge: s256(&verifier),
        verifier,
    }
}

/// `pairs` as an `application/x-www-form-urlencoded` body.
pub fn form_body(pairs: &[(&str, &str)]) -> String {
    let mut url = reqwest::Url::parse("http://form.invalid/").expect("url");
    url.query_pairs_mut().extend_pairs(pairs);
    url.query().unwrap_or_default().to_owned()
}

/// A registered client, as a chat app keeps it.
#[derive(Debug, Clone)]
pub struct App {
    /// The service's base URL.
    pub base: String,
    /// Its client id.
    pub client_id: String,
    /// Its secret, for a confidential client.
    pub client_secret: Option<String>,
    /// Where codes come back.
    pub redirect_uri: String,
}

/// `POST /oauth/register` with `body`: (status, answer).
pub async fn register_raw(base: &str, body: &Value) -> (u16, Value) {
    let response = crate::http_client()
        .post(format!("{base}/oauth/register"))
        .json(body)
        .send()
        .await
        .expect("register answered");
    crate::decode(response).await
}

/// Registers a public client named `name` with one loopback redirect URI.
pub async fn register(base: &str, name: &str) -> App {
    let redirect_uri = "http://127.0.0.1:9/callback".to_owned();
    let (status, answer) = register_raw(
        base,
        &json!({
            "client_name": name,
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        }),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    App {
        base: base.to_owned(),
        client_id: answer["client_id"].as_str().expect("client_id").to_owned(),
        client_secret: None,
        redirect_uri,
    }
}

impl App {
    /// The authorization URL for `challenge` and `state`, plus `extra` parameters.
    pub fn authorize_url(&self, challenge: &str, state: &str, extra: &[(&str, &str)]) -> String {
        let mut url = reqwest::Url::parse(&format!("{}/oauth/authorize", self.base)).expect("url");
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &self.client_id)
                .append_pair("redirect_uri", &self.redirect_uri)
                .append_pair("code_challenge", challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", state)
                .append_pair("resource", &format!("{}/mcp", self.base));
            for (k, v) in extra {
                query.append_pair(k, v);
            }
        }
        url.to_string()
    }

    /// `POST /oauth/token` with `pairs` (and this client's id): (status, answer).
    pub async fn token(&self, pairs: &[(&str, &str)]) -> (u16, Value) {
        let mut form: Vec<(&str, &str)> = vec![("client_id", &self.client_id)];
        if let Some(secret) = &self.client_secret {
            form.push(("client_secret", secret));
        }
        form.extend_from_slice(pairs);
        let response = crate::http_client()
            .post(format!("{}/oauth/token", self.base))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form_body(&form))
            .send()
            .await
            .expect("token answered");
        crate::decode(response).await
    }

    /// Exchanges `code` with `verifier`.
    pub async fn exchange(&self, code: &str, verifier: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("code_verifier", verifier),
            ("redirect_uri", &self.redirect_uri),
        ])
        .await
    }

    /// Exchanges a refresh token.
    pub async fn refresh(&self, refresh_token: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ])
        .await
    }
}

/// Signs in on a sign-in page by posting its form; the answer (a 303 back on success).
pub async fn sign_in(
    browser: &Browser,
    base: &str,
    page: &Page,
    owner: &str,
    password: &str,
) -> Page {
    let csrf = page
        .input("csrf")
        .expect("the sign-in form has a CSRF token");
    let return_to = page.input("return_to").unwrap_or_default();
    browser
        .post_form(
            &format!("{base}/oauth/sign-in"),
            &[
                ("csrf", &csrf),
                ("return_to", &return_to),
                ("username", owner),
                ("password", password),
            ],
        )
        .await
}

/// Posts the consent form of `page` with `project`, `scopes` and `decision`.
pub async fn decide(
    browser: &Browser,
    base: &str,
    page: &Page,
    project: &str,
    scopes: &[&str],
    decision: &str,
) -> Page {
    let csrf = page
        .input("csrf")
        .expect("the consent form has a CSRF token");
    let authorization = page
        .input("authorization")
        .expect("the consent form carries the request");
    let mut pairs = vec![
        ("csrf", csrf.as_str()),
        ("authorization", authorization.as_str()),
        ("project", project),
    ];
    pairs.extend(scopes.iter().map(|s| ("scope", *s)));
    pairs.push(("decision", decision));
    browser
        .post_form(&format!("{base}/oauth/authorize"), &pairs)
        .await
}

/// The consent page for `app`'s request, signing `owner` in first if needed.
pub async fn consent_page(
    browser: &Browser,
    app: &App,
    pkce: &Pkce,
    state: &str,
    owner: &str,
    password: &str,
) -> Page {
    let url = app.authorize_url(&pkce.challenge, state, &[]);
    let page = browser.get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    if page.input("authorization").is_some() {
        return page;
    }
    let signed_in = sign_in(browser, &app.base, &page, owner, password).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    let back = signed_in.location.expect("back to the authorization");
    let page = browser.get(&back).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.input("authorization").is_some(),
        "the consent page: {}",
        page.body
    );
    page
}

/// Tokens a connection got.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// The access token.
    pub access: String,
    /// The refresh token.
    pub refresh: String,
}

/// The whole flow: consent with both scopes on `project`, then the code exchange.
pub async fn connect(
    browser: &Browser,
    app: &App,
    owner: &str,
    password: &str,
    project: &str,
) -> Tokens {
    let pkce = pkce();
    let page = consent_page(browser, app, &pkce, "st-1", owner, password).await;
    let answer = decide(
        browser,
        &app.base,
        &page,
        project,
        &["osfoundry:read", "osfoundry:run"],
        "allow",
    )
    .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.redirect_param("state").as_deref(), Some("st-1"));
    let code = answer.redirect_param("code").expect("a code");
    let (status, tokens) = app.exchange(&code, &pkce.verifier).await;
    assert_eq!(status, 200, "{tokens}");
    Tokens {
        access: tokens["access_token"].as_str().expect("access").to_owned(),
        refresh: tokens["refresh_token"]
            .as_str()
            .expect("refresh")
            .to_owned(),
    }
}

/// The status `/mcp` answers an `initialize` with `token`.
pub async fn mcp_status(base: &str, token: &str) -> u16 {
    crate::http_client()
        .post(format!("{base}/mcp"))
        .bearer_auth(token)
        .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        }))
        .send()
        .await
        .expect("mcp answered")
        .status()
        .as_u16()
}
