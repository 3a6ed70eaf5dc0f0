//! The authorization server's pages: plain server-rendered HTML forms that work without
//! JavaScript, every one with a CSRF token, none of them frameable.
//!
//! The labels and field names are a contract (automation and assistive technology find the
//! controls by them): the sign-in form posts `username` ("Owner name") and `password`
//! ("Password"); the consent form posts `project`, `scope` (one per checked box) and
//! `decision` (`allow` / `deny`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::auth::Scope;

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#1b1b1b}\
label{display:block;margin:.8rem 0 .2rem}input[type=text],input[type=password],select{width:100%;padding:.4rem;font-size:1rem}\
.scope label{display:inline;margin-left:.4rem}.scope{margin:.5rem 0}button{font-size:1rem;padding:.45rem 1.2rem;margin:1rem .6rem 0 0}\
.error{color:#a40000;font-weight:600}.client{font-weight:600}small{color:#555}";

/// A whole page with the headers every page carries: no framing, no caching, no referrer.
pub fn page(status: StatusCode, title: &str, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · graphrelay" }
                style { (STYLE) }
            }
            body {
                h1 { (title) }
                (body)
            }
        }
    };
    html_response(status, markup, PAGE_POLICY)
}

/// The content security policy of the sign-in and consent pages: no script at all.
const PAGE_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'";

/// `markup` as an HTML answer with the headers every page of the service carries: `policy` as
/// its content security policy, no framing, no caching, no cross-origin referrer, no sniffing.
pub fn html_response(status: StatusCode, markup: Markup, policy: &'static str) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(policy),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A page that only says something (an error that must not be redirected, a confirmation).
pub fn message(status: StatusCode, title: &str, text: &str) -> Response {
    page(status, title, html! { p { (text) } })
}

/// What the sign-in page shows.
pub struct SignInView<'a> {
    /// Where the form posts.
    pub action: &'a str,
    /// The form's CSRF token (also in the CSRF cookie).
    pub csrf: &'a str,
    /// Where a successful sign-in returns to.
    pub return_to: &'a str,
    /// Why the last attempt failed.
    pub error: Option<&'a str>,
    /// The name typed last time.
    pub username: &'a str,
}

/// The owner sign-in form.
pub fn sign_in(status: StatusCode, view: &SignInView<'_>) -> Response {
    page(
        status,
        "Sign in",
        html! {
            p { "Sign in as the owner of the projects this connection will reach." }
            @if let Some(error) = view.error {
                p.error role="alert" { (error) }
            }
            form method="post" action=(view.action) {
                input type="hidden" name="csrf" value=(view.csrf);
                input type="hidden" name="return_to" value=(view.return_to);
                label for="username" { "Owner name" }
                input type="text" id="username" name="username" value=(view.username)
                    autocomplete="username" required autofocus;
                label for="password" { "Password" }
                input type="password" id="password" name="password"
                    autocomplete="current-password" required;
                button type="submit" { "Sign in" }
            }
            p { small { "No password? The operator can make a one-time sign-in link with "
                code { "relay admin owner sign-in-link NAME" }
                "; open it in this browser, then reload this page." } }
        },
    )
}

/// What the consent page shows.
pub struct ConsentView<'a> {
    /// Where the form posts.
    pub action: &'a str,
    /// The session's CSRF token.
    pub csrf: &'a str,
    /// The authorization request, carried through the form and checked again on post.
    pub authorization: &'a str,
    /// The client's name as it registered.
    pub client_name: &'a str,
    /// The host the code will be sent to.
    pub redirect_host: &'a str,
    /// Who is signed in.
    pub owner_name: &'a str,
    /// The owner's projects: (id, name).
    pub projects: &'a [(String, String)],
    /// The scopes the client asked for.
    pub scopes: &'a [Scope],
}

/// The label of a scope's checkbox.
pub fn scope_label(scope: Scope) -> &'static str {
    match scope {
        Scope::Read => "Read graph sessions and runs",
        Scope::Run => "Start and cancel runs",
    }
}

fn scope_id(scope: Scope) -> &'static str {
    match scope {
        Scope::Read => "scope-read",
        Scope::Run => "scope-run",
    }
}

/// The consent form: one project, the scopes, allow or deny.
pub fn consent(view: &ConsentView<'_>) -> Response {
    page(
        StatusCode::OK,
        "Connect a chat app",
        html! {
            p {
                span.client { (view.client_name) }
                " (answers go to " strong { (view.redirect_host) } ") asks to act for you, "
                strong { (view.owner_name) } ", on one project."
            }
            form method="post" action=(view.action) {
                input type="hidden" name="csrf" value=(view.csrf);
                input type="hidden" name="authorization" value=(view.authorization);
                label for="project" { "Project" }
                select id="project" name="project" required {
                    @for (id, name) in view.projects {
                        option value=(id) { (name) }
                    }
                }
                fieldset {
                    legend { "It may" }
                    @for scope in view.scopes {
                        div.scope {
                            input type="checkbox" name="scope" value=(scope.as_str())
                                id=(scope_id(*scope)) checked;
                            label for=(scope_id(*scope)) { (scope_label(*scope)) }
                        }
                    }
                }
                button type="submit" name="decision" value="allow" { "Allow" }
                button type="submit" name="decision" value="deny" { "Deny" }
            }
            p { small { "You can revoke this connection at any time under Connections in your "
                a href="/console" { "console" } "." } }
        },
    )
}

/// The page a sign-in link opens: one button, so a link scanner that follows it signs no one in.
pub fn link(action: &str, csrf: &str, link: &str) -> Response {
    page(
        StatusCode::OK,
        "Sign in with a link",
        html! {
            p { "This one-time link signs its owner in to graphrelay in this browser." }
            form method="post" action=(action) {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="link" value=(link);
                button type="submit" { "Sign in" }
            }
        },
    )
}
