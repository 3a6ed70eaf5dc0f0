//! The owner's console at `/console`: server-rendered pages (maud) behind the owner's browser
//! session, plain forms that work without JavaScript, and one static script (`/console/app.js`)
//! that refreshes the runs and task lists and keeps an assignment's idempotency key while its
//! goal is unchanged.
//!
//! Every page and action looks its object up through the signed-in owner, so another owner's
//! id answers exactly as a missing one (404). Every state change is a POST carrying the
//! session's CSRF token (403 without). The labels and button texts are a contract (tests and
//! assistive technology find controls by them): "Link chat" with "Host" and "Event
//! subscription", "Assign task" with "Goal", "Cancel", "Revoke", "Sign out", "Sign out
//! everywhere".

mod account;
mod chats;
mod projects;
mod runs;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};

use crate::auth::OwnerIdentity;
use crate::chat_tasks::{OWNER_REFRESH_SECS, TaskError};
use crate::http::AppState;
use crate::http::answers::{self, Answer};
use crate::http::oauth::{base_url, signin};
use crate::runs::RunError;
use crate::store::{BrowserSessionRecord, OwnerRecord, StoreError, Timestamp};

/// Where the console lives.
pub const CONSOLE_PATH: &str = "/console";
/// How often the runs list refreshes itself by default.
pub const RUNS_REFRESH: Duration = Duration::from_secs(5);
/// How often a chat link's task list refreshes itself by default (the seed's 15 s).
pub const TASKS_REFRESH: Duration = Duration::from_secs(OWNER_REFRESH_SECS);
/// Largest form the console takes: a goal is at most a few thousand characters.
pub const MAX_FORM_BYTES: usize = 64 * 1024;

/// The console's script, served as a file so the pages' CSP needs no inline script.
const APP_JS: &str = include_str!("app.js");

const STYLE: &str = "*{box-sizing:border-box}body{font-family:system-ui,sans-serif;margin:0;color:#1b1b1b;line-height:1.4}\
header{background:#1d3557;color:#fff;padding:.5rem 1rem;display:flex;flex-wrap:wrap;gap:.8rem;align-items:center}\
header a{color:#fff}header form{margin-left:auto}main{max-width:64rem;margin:0 auto;padding:0 1rem 2rem}\
label{display:block;margin:.6rem 0 .2rem;font-weight:600}.check label{display:inline;margin-left:.4rem}\
input[type=text],select,textarea{width:100%;max-width:34rem;padding:.4rem;font-size:1rem}textarea{min-height:5rem}\
button{font-size:1rem;padding:.35rem 1rem;margin:.4rem .4rem .4rem 0}form.inline{display:inline}\
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3rem .4rem;border-bottom:1px solid #ddd;vertical-align:top}\
.status{font-weight:600}td.t{white-space:nowrap;font-size:.9rem}.muted{color:#555}.error{color:#a40000}pre{white-space:pre-wrap;word-break:break-word;background:#f4f4f4;padding:.5rem}\
td{overflow-wrap:anywhere}.note{display:block;font-size:.85rem;color:#444}main:has(table.runs){max-width:80rem}\
table.runs{table-layout:fixed}table.runs td{overflow-wrap:break-word}table.runs td.t{white-space:normal}\
table.runs td button{padding:.3rem .5rem;font-size:.9rem;margin:0}\
table.runs th:nth-child(1){width:12%}table.runs th:nth-child(2),table.runs th:nth-child(3){width:10%}\
table.runs th:nth-child(4),table.runs th:nth-child(5),table.runs th:nth-child(6){width:8%}\
table.runs th:nth-child(7){width:7%}table.runs th:nth-child(8){width:8.5%}table.runs th:nth-child(10){width:5.5rem}\
section{margin:1.2rem 0}.card{border:1px solid #ddd;border-radius:.3rem;padding:.5rem .8rem;margin:.5rem 0}\
@media (max-width:40rem){table,thead,tbody,tr,th,td{display:block}thead{display:none}tr{border:1px solid #ddd;margin:.5rem 0;padding:.3rem}\
td{border:none;padding:.15rem .3rem}td[data-label]::before{content:attr(data-label) \": \";font-weight:600}}";

/// The console's routes.
pub fn routes(app: Arc<AppState>) -> Router {
    let c = CONSOLE_PATH;
    Router::new()
        .route(c, get(projects::page))
        .route(&format!("{c}/app.js"), get(script))
        .route(
            &format!("{c}/connections/{{id}}/revoke"),
            post(projects::revoke),
        )
        .route(
            &format!("{c}/agents/{{id}}/revoke"),
            post(projects::revoke_agent),
        )
        .route(&format!("{c}/projects/{{id}}/runs"), get(runs::page))
        .route(
            &format!("{c}/projects/{{id}}/runs/list"),
            get(runs::fragment),
        )
        .route(&format!("{c}/runs/{{id}}"), get(runs::detail))
        .route(&format!("{c}/runs/{{id}}/cancel"), post(runs::cancel))
        .route(&format!("{c}/chats"), post(chats::create))
        .route(&format!("{c}/chats/{{id}}"), get(chats::page))
        .route(
            &format!("{c}/chats/{{id}}/tasks"),
            get(chats::fragment).post(chats::assign),
        )
        .route(
            &format!("{c}/chats/{{id}}/subscription"),
            post(chats::subscription),
        )
        .route(&format!("{c}/tasks/{{id}}"), get(chats::task))
        .route(&format!("{c}/tasks/{{id}}/cancel"), post(chats::cancel))
        .route(
            &format!("{c}/tasks/{{id}}/artifacts/{{artifact_id}}"),
            get(chats::artifact),
        )
        .route(&format!("{c}/account"), get(account::page))
        .route(&format!("{c}/sign-out"), post(account::sign_out))
        .route(
            &format!("{c}/sign-out-everywhere"),
            post(account::sign_out_everywhere),
        )
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .with_state(app)
}

async fn script() -> Response {
    let mut response = APP_JS.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The signed-in owner of the browser making the request.
pub struct Signed {
    /// The browser session (its `csrf` guards every form).
    pub session: BrowserSessionRecord,
    /// The owner.
    pub owner: OwnerRecord,
}

impl Signed {
    /// The owner as the chat task functions take it.
    pub fn identity(&self) -> OwnerIdentity {
        OwnerIdentity {
            token_id: format!("console:{}", self.session.id_hash),
            owner_id: self.owner.id.clone(),
        }
    }

    /// Refuses a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, posted: Option<&str>) -> Result<(), Refusal> {
        if posted.is_some_and(|posted| crate::oauth::same_secret(&self.session.csrf, posted)) {
            Ok(())
        } else {
            Err(Refusal::new(signin::csrf_refused()))
        }
    }
}

impl FromRequestParts<Arc<AppState>> for Signed {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        match signin::signed_in(app, &parts.headers).await {
            Ok(Some((session, owner))) => Ok(Signed { session, owner }),
            Ok(None) if parts.method == Method::GET => {
                let requested = parts
                    .uri
                    .path_and_query()
                    .map_or(CONSOLE_PATH, |p| p.as_str());
                let return_to = if signin::is_local_path(requested) {
                    requested
                } else {
                    CONSOLE_PATH
                };
                Err(signin::sign_in_page(
                    app,
                    &parts.headers,
                    StatusCode::OK,
                    return_to,
                    "",
                    None,
                ))
            }
            // A form from a session that ended cannot prove its token.
            Ok(None) => Err(signin::csrf_refused()),
            Err(error) => Err(signin::unavailable(&error)),
        }
    }
}

/// A page or action that could not be answered as asked; the response says why.
pub struct Refusal(Box<Response>);

impl Refusal {
    /// A refusal that answers `response`.
    pub fn new(response: Response) -> Self {
        Refusal(Box::new(response))
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        *self.0
    }
}

impl Refusal {
    /// A page for `answer`: the console's one not-found page for a 404, else a message with
    /// the answer's status and `Retry-After`.
    pub fn answer(answer: &Answer) -> Self {
        if answer.status == StatusCode::NOT_FOUND {
            return Refusal::new(not_found());
        }
        let (title, text) = answers::for_person(answer);
        Refusal::new(answers::with_retry_after(
            message(answer.status, title, &text),
            answer,
        ))
    }
}

impl From<StoreError> for Refusal {
    fn from(error: StoreError) -> Self {
        Refusal::answer(&answers::store_answer(&error, "console request failed"))
    }
}

impl From<RunError> for Refusal {
    fn from(error: RunError) -> Self {
        Refusal::answer(&answers::run_answer(error, "console request failed"))
    }
}

impl From<TaskError> for Refusal {
    fn from(error: TaskError) -> Self {
        Refusal::answer(&answers::task_answer(error))
    }
}

/// What a console handler answers.
pub type ConsoleResult = Result<Response, Refusal>;

/// The one answer for an object that is missing or another owner's.
pub fn not_found() -> Response {
    message(
        StatusCode::NOT_FOUND,
        "Not found",
        "There is nothing here, or it is not yours. Go back to the console's projects.",
    )
}

/// A page that only says something, outside any session's navigation.
pub fn message(status: StatusCode, title: &str, text: &str) -> Response {
    shell(status, title, None, html! { p { (text) } })
}

/// A 303 to a console path (after a form post, so a reload does not post again).
pub fn see_other(path: &str) -> Response {
    Redirect::to(path).into_response()
}

/// A console page for the signed-in owner: navigation, sign out, then `body`.
pub fn page(signed: &Signed, title: &str, body: Markup) -> Response {
    shell(StatusCode::OK, title, Some(signed), body)
}

fn shell(status: StatusCode, title: &str, signed: Option<&Signed>, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · graphrelay console" }
                // Raw text: HTML escapes are not decoded inside <style>.
                style { (maud::PreEscaped(STYLE)) }
                script src="/console/app.js" defer {}
            }
            body {
                header {
                    strong { "graphrelay" }
                    a href="/console" { "Projects" }
                    a href="/console/account" { "Sessions" }
                    @if let Some(signed) = signed {
                        span.muted { (signed.owner.name) }
                        form.inline method="post" action="/console/sign-out" {
                            (csrf_field(signed))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    crate::http::oauth::pages::html_response(status, markup, CONSOLE_POLICY)
}

/// The console's content security policy: only its own script, only its own origin.
const CONSOLE_POLICY: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; \
    img-src 'self'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'";

/// The header that marks a list fragment, so the script never swaps in a whole page (such as
/// the sign-in page a lapsed session gets).
pub const FRAGMENT_HEADER: &str = "x-console-fragment";

/// A fragment of a page (a list the script swaps in), with the same headers.
pub fn fragment(markup: Markup) -> Response {
    let mut response =
        crate::http::oauth::pages::html_response(StatusCode::OK, markup, CONSOLE_POLICY);
    response
        .headers_mut()
        .insert(FRAGMENT_HEADER, HeaderValue::from_static("1"));
    response
}

/// The hidden field that carries the session's CSRF token.
pub fn csrf_field(signed: &Signed) -> Markup {
    html! { input type="hidden" name="csrf" value=(signed.session.csrf); }
}

/// A time as the console shows it (UTC, to the second).
pub fn when(time: Option<Timestamp>) -> String {
    time.map_or_else(
        || "—".to_owned(),
        |t| {
            let text = t.to_rfc3339();
            let text = text.split('.').next().unwrap_or(&text).replace('T', " ");
            format!("{} UTC", text.trim_end_matches('Z'))
        },
    )
}

/// The base URL (for links in pages that must be absolute, such as a sign-in return).
pub fn base(app: &AppState, parts: &axum::http::HeaderMap) -> String {
    base_url(app, parts)
}
