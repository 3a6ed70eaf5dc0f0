//! A client ID metadata document is fetched by anyone's `GET /oauth/authorize`, so the fetches a
//! stranger can cause are bounded (issue 44's second red team: 60 concurrent requests made 62
//! fetches): concurrent requests for one URL share one fetch, a document and a failure are both
//! remembered, and one client address causes at most `FETCHES_PER_ADDRESS` fetches a window.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use relay_service::oauth::cimd::{FAILURE_FRESHNESS, FETCH_WINDOW, FETCHES_PER_ADDRESS};
use serde_json::json;

use crate::common::TestService;
use crate::common::oauth::{self, Browser};

/// A document server on loopback: `/client.json` is a good document, served slowly enough
/// that concurrent requests overlap, `/missing/N.json` answers 404; every fetch is counted.
async fn document_server() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let fetches = Arc::new(AtomicUsize::new(0));
    let url = format!("{base}/client.json");
    let counted = fetches.clone();
    let missing = fetches.clone();
    let router = axum::Router::new()
        .route(
            "/client.json",
            get(move || {
                let counted = counted.clone();
                let document = json!({
                    "client_id": url,
                    "client_name": "Doc client",
                    "redirect_uris": ["http://127.0.0.1:9/callback"],
                });
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    // Long enough for the requests to be waiting on this one fetch; the
                    // assertion does not depend on it.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    axum::Json(document)
                }
            }),
        )
        .route(
            "/missing/{n}",
            get(move || {
                missing.fetch_add(1, Ordering::SeqCst);
                async { StatusCode::NOT_FOUND }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    (base, fetches)
}

async fn dev_service() -> TestService {
    TestService::start_with_config(relay_service::ServiceConfig {
        dev: true,
        ..relay_service::ServiceConfig::default()
    })
    .await
}

fn authorize_url(service: &TestService, client_id: &str) -> String {
    let app = oauth::App {
        base: service.base.clone(),
        client_id: client_id.to_owned(),
        client_secret: None,
        redirect_uri: "http://127.0.0.1:9/callback".into(),
    };
    app.authorize_url(&oauth::pkce().challenge, "s", &[])
}

/// `n` authorization requests for `url` at once, each from a browser of its own; their
/// statuses.
async fn at_once(url: &str, n: usize) -> Vec<u16> {
    let requests = (0..n).map(|_| {
        let url = url.to_owned();
        tokio::spawn(async move { Browser::new().get(&url).await.status })
    });
    let mut statuses = Vec::new();
    for request in requests.collect::<Vec<_>>() {
        statuses.push(request.await.expect("request task"));
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_concurrent_authorize_requests_for_one_document_fetch_it_once() {
    let (documents, fetches) = document_server().await;
    let service = dev_service().await;
    let url = authorize_url(&service, &format!("{documents}/client.json"));
    let statuses = at_once(&url, 60).await;
    assert!(
        statuses.iter().all(|s| *s == 200),
        "every request gets the sign-in page: {statuses:?}"
    );
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "one fetch for 60 requests"
    );
    assert_eq!(Browser::new().get(&url).await.status, 200);
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "a later request is answered from the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_that_cannot_be_fetched_is_remembered_as_such() {
    let (documents, fetches) = document_server().await;
    let service = dev_service().await;
    let url = authorize_url(&service, &format!("{documents}/missing/1.json"));
    let statuses = at_once(&url, 60).await;
    assert!(statuses.iter().all(|s| *s == 400), "{statuses:?}");
    let page = Browser::new().get(&url).await;
    assert!(page.body.contains("answered HTTP 404"), "{}", page.body);
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "one fetch for 61 requests, the failure remembered"
    );
    service.clock.advance(FAILURE_FRESHNESS);
    assert_eq!(Browser::new().get(&url).await.status, 400);
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        2,
        "fetched again once the failure is forgotten"
    );
}

#[tokio::test]
async fn one_address_causes_a_bounded_number_of_fetches() {
    let (documents, fetches) = document_server().await;
    let service = dev_service().await;
    let limit = usize::try_from(FETCHES_PER_ADDRESS).expect("small");
    let stranger = Browser::from_address(IpAddr::from([127, 0, 0, 3]));
    let mut statuses = Vec::new();
    for n in 0..=limit {
        let url = authorize_url(&service, &format!("{documents}/missing/{n}.json"));
        statuses.push(stranger.get(&url).await.status);
    }
    assert_eq!(statuses[..limit], vec![400; limit], "{statuses:?}");
    let refused = stranger
        .get(&authorize_url(
            &service,
            &format!("{documents}/missing/x.json"),
        ))
        .await;
    assert_eq!((statuses[limit], refused.status), (429, 429));
    assert!(refused.retry_after.is_some(), "429 says when to retry");
    assert!(
        refused.body.contains("client metadata documents"),
        "{}",
        refused.body
    );
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        limit,
        "the refusals fetched nothing"
    );

    // Another address is not held back, and the stranger may fetch again next window.
    let other = Browser::from_address(IpAddr::from([127, 0, 0, 4]));
    let url = authorize_url(&service, &format!("{documents}/missing/x.json"));
    assert_eq!(other.get(&url).await.status, 400);
    service.clock.advance(FETCH_WINDOW);
    let url = authorize_url(&service, &format!("{documents}/missing/y.json"));
    assert_eq!(stranger.get(&url).await.status, 400);
    assert_eq!(fetches.load(Ordering::SeqCst), limit + 2);
}
