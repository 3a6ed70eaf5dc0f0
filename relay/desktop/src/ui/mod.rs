//! `relay desktop ui`: the desktop's own page, on loopback only. Graph sessions with their
//! sharing per project, tool policies, pending approvals and the run history with each run's
//! timeline. It reads and writes the same state file as the `relay desktop …` commands, so a
//! running `relay desktop run` (another process on that file) sees every change: it re-checks
//! consent before each command, watches the sharing version, re-reads the tool policies for
//! each run and polls each approval's status.
//!
//! Server-rendered HTML and plain forms; one small script of our own ([`live`]) re-reads the page
//! every second so it keeps itself current. Who may use it: [`access`].

pub mod access;
mod actions;
pub mod live;
mod pages;
pub mod timeline;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use self::access::{Access, BrowserSession, Served};
use crate::state::{AsyncState, DesktopState};
use relay_protocol::clock::Clock;

/// The largest form body taken (the biggest form, the sharing of one session, is far smaller).
pub const MAX_FORM_BYTES: usize = 64 * 1024;
/// The most fields of one form that are looked at.
pub const MAX_FORM_FIELDS: usize = 512;
/// The path of the link's landing (the token is its `token` query parameter).
pub const HOME: &str = "/";

/// Why the page could not start.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// `--listen` is not a loopback address.
    #[error(
        "--listen {0} is not a loopback address: the desktop page serves only this machine; give 127.0.0.1:PORT or [::1]:PORT"
    )]
    NotLoopback(String),
    /// `--listen` is not an address.
    #[error("--listen {0} is not an address with a port, such as 127.0.0.1:0: {1}")]
    BadAddress(String, String),
    /// The socket could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// No randomness for the token.
    #[error(transparent)]
    Random(#[from] access::NoRandomness),
}

/// The address `--listen` gives, refused unless it is a loopback IP address with a port
/// (`localhost:PORT` stands for `127.0.0.1:PORT`).
pub fn loopback_listen(text: &str) -> Result<SocketAddr, UiError> {
    let numeric = match text.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => text.to_owned(),
    };
    let address: SocketAddr = numeric
        .parse()
        .map_err(|e: std::net::AddrParseError| UiError::BadAddress(text.into(), e.to_string()))?;
    if !address.ip().is_loopback() {
        return Err(UiError::NotLoopback(text.into()));
    }
    Ok(address)
}

/// What every handler shares.
pub(crate) struct Page {
    state: AsyncState,
    clock: Arc<dyn Clock>,
    served: Served,
    access: Mutex<Access>,
}

impl Page {
    fn access(&self) -> std::sync::MutexGuard<'_, Access> {
        self.access
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The page for the server at `address`: its router and the one-time link that opens it.
pub struct DesktopPage {
    /// `http://ADDRESS/?token=…`: works once.
    pub url: String,
    /// The routes, behind the access rules.
    pub router: Router,
}

impl DesktopPage {
    /// A page over `state`, served at `address`, with a fresh one-time token.
    pub fn new(
        state: DesktopState,
        clock: Arc<dyn Clock>,
        address: SocketAddr,
    ) -> Result<Self, UiError> {
        let token = access::secret()?;
        let served = Served::at(address);
        let url = format!("{}{HOME}?token={token}", served.origin);
        let page = Arc::new(Page {
            state: AsyncState::new(state),
            clock,
            served,
            access: Mutex::new(Access::new(token)),
        });
        Ok(Self {
            url,
            router: router(page),
        })
    }
}

fn router(page: Arc<Page>) -> Router {
    Router::new()
        .route(HOME, get(pages::sessions))
        .route("/policies", get(pages::policies).post(actions::policies))
        .route("/approvals", get(pages::approvals))
        .route("/approvals/decide", post(actions::decide))
        .route("/runs", get(pages::runs))
        .route("/runs/{execution_id}", get(pages::run))
        .route(live::SCRIPT_PATH, get(live::script))
        .route("/runs/cancel", post(actions::cancel))
        .route("/sharing", post(actions::sharing))
        .route("/projects", post(actions::project))
        .layer(axum::middleware::from_fn_with_state(page.clone(), guard))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .with_state(page)
}

/// A server bound to a loopback port, not serving yet.
pub struct Bound {
    /// The address bound (the port chosen when `:0` was asked for).
    pub address: SocketAddr,
    /// The one-time link.
    pub url: String,
    listener: tokio::net::TcpListener,
    router: Router,
}

/// Binds `listen` (which [`loopback_listen`] checked) and makes the page for it.
pub async fn bind(
    listen: SocketAddr,
    state: DesktopState,
    clock: Arc<dyn Clock>,
) -> Result<Bound, UiError> {
    if !listen.ip().is_loopback() {
        return Err(UiError::NotLoopback(listen.to_string()));
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| UiError::Bind(listen, e))?;
    let address = listener
        .local_addr()
        .map_err(|e| UiError::Bind(listen, e))?;
    let page = DesktopPage::new(state, clock, address)?;
    Ok(Bound {
        address,
        url: page.url,
        listener,
        router: page.router,
    })
}

impl Bound {
    /// Serves until `shutdown` fires.
    pub async fn serve(self, shutdown: CancellationToken) -> std::io::Result<()> {
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
    }
}

/// Runs a handler's work, which reads and writes SQLite (and may wait out the relay's write
/// lock), on the state's own thread, never on a runtime worker.
pub(crate) async fn on_state<T>(
    state: AsyncState,
    work: impl FnOnce(&DesktopState) -> T + Send + 'static,
) -> Response
where
    T: IntoResponse + Send + 'static,
{
    match state.call(move |state| Ok(work(state))).await {
        Ok(done) => done.into_response(),
        Err(e) => pages::failure(&e),
    }
}

/// The browser session of a request that passed [`guard`].
#[derive(Clone)]
pub(crate) struct Signed(pub BrowserSession);

/// Every request: the served Host, the page's own Origin, then the link's token (on the home
/// page) or the session cookie.
async fn guard(State(page): State<Arc<Page>>, mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !page.served.host_ok(headers) {
        return pages::refusal(
            StatusCode::FORBIDDEN,
            &format!(
                "This page answers only at {}; the request named another host.",
                page.served.origin
            ),
        );
    }
    if !page.served.origin_ok(headers) {
        return pages::refusal(
            StatusCode::FORBIDDEN,
            "The request came from another site's page; the desktop page takes requests only from itself.",
        );
    }
    if let Some(token) = link_token(&request) {
        return redeem(&page, &token);
    }
    let session = page
        .served
        .cookie(request.headers())
        .and_then(|cookie| page.access().session(cookie).cloned());
    let Some(session) = session else {
        return pages::refusal(
            StatusCode::UNAUTHORIZED,
            "Open the link `relay desktop ui` printed, in this browser. A link works once: run `relay desktop ui` again for a new one.",
        );
    };
    request.extensions_mut().insert(Signed(session));
    secured(next.run(request).await)
}

/// The `token` of a GET of the home page, if it has one.
fn link_token(request: &Request) -> Option<String> {
    if request.uri().path() != HOME || request.method() != axum::http::Method::GET {
        return None;
    }
    request
        .uri()
        .query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "token")
        .map(|(_, value)| value.to_owned())
}

/// Spends the link's token: the cookie and a redirect to the page, or a refusal.
fn redeem(page: &Page, token: &str) -> Response {
    match page.access().redeem(token) {
        Ok(Some(session)) => {
            let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, HOME)]).into_response();
            if let Ok(cookie) = HeaderValue::from_str(&page.served.set_cookie(&session)) {
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            secured(response)
        }
        Ok(None) => pages::refusal(
            StatusCode::UNAUTHORIZED,
            "This link has been used already or is not the one printed. A link works once: run `relay desktop ui` again for a new one.",
        ),
        Err(e) => pages::refusal(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The tools the relay has, by name (the policies page offers a select for each).
pub(crate) fn known_tools() -> Vec<String> {
    runner::host::tools::ToolRegistry::standard(None)
        .map(|tools| tools.specs().into_iter().map(|spec| spec.name).collect())
        .unwrap_or_default()
}

/// The headers every answer carries: no framing, no caching, no script but the page's own file,
/// no sniffing.
pub(crate) fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // `same-origin`, not `no-referrer`: with the latter Chromium posts forms with `Origin: null`.
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

#[cfg(test)]
mod tests;
