//! The owner's browser sessions ("signed in on …"), "Sign out" and "Sign out everywhere".

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use maud::html;

use super::projects::CsrfForm;
use super::{ConsoleResult, Signed, csrf_field, when};
use crate::http::AppState;
use crate::http::oauth::{base_url, signin};
use crate::oauth::BROWSER_SESSION_IDLE;

/// `GET /console/account`.
pub async fn page(State(app): State<Arc<AppState>>, signed: Signed) -> ConsoleResult {
    let now = app.clock.now();
    let sessions = app
        .store
        .browser_sessions(&signed.owner.id, now.saturating_sub(BROWSER_SESSION_IDLE))
        .await?;
    let body = html! {
        p { "Signed in as " strong { (signed.owner.name) } "." }
        h2 { "Sessions" }
        ul { @for s in &sessions {
            li {
                "signed in on " (when(Some(s.created_at)))
                ", last active " (when(Some(s.last_seen_at)))
                @if s.id_hash == signed.session.id_hash { " (this browser)" }
            }
        } }
        form method="post" action="/console/sign-out-everywhere" {
            (csrf_field(&signed))
            button type="submit" { "Sign out everywhere" }
        }
    };
    Ok(super::page(&signed, "Sessions", body))
}

/// A redirect to the console (the sign-in page now) that clears the session cookie.
fn signed_out(app: &AppState, headers: &HeaderMap) -> axum::response::Response {
    let base = base_url(app, headers);
    let mut response = super::see_other(super::CONSOLE_PATH);
    let secure = if base.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    if let Ok(clear) = HeaderValue::from_str(&format!(
        "{}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}",
        signin::cookie_name(&base, "session")
    )) {
        response.headers_mut().append(header::SET_COOKIE, clear);
    }
    response
}

/// `POST /console/sign-out`: ends this browser's session.
pub async fn sign_out(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    signed: Signed,
    Form(form): Form<CsrfForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    app.store
        .end_browser_session(&signed.session.id_hash, app.clock.now())
        .await?;
    Ok(signed_out(&app, &headers))
}

/// `POST /console/sign-out-everywhere`: ends every session of the owner.
pub async fn sign_out_everywhere(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    signed: Signed,
    Form(form): Form<CsrfForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    app.store
        .end_browser_sessions(&signed.owner.id, app.clock.now())
        .await?;
    Ok(signed_out(&app, &headers))
}
