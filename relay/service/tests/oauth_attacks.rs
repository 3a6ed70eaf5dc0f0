//! Every rule of the authorization server, tried by someone breaking it: PKCE left out or
//! faked, codes and refresh tokens replayed, redirect URIs swapped, CSRF tokens dropped,
//! another owner's project, a denial, a revoked connection, password guessing, internal
//! metadata documents.

use std::time::Duration;

use crate::common::oauth::{self, Browser};
use crate::common::{TestService, http_client};
use crate::oauth_flow::{PASSWORD, service};
use relay_service::admin;
use relay_service::oauth::connections;
use serde_json::json;

/// A fresh code for `app` on `project` and the PKCE pair it is bound to.
async fn code(browser: &Browser, app: &oauth::App, project: &str) -> (String, oauth::Pkce) {
    let pkce = oauth::pkce();
    let page = oauth::consent_page(browser, app, &pkce, "s", "ann", PASSWORD).await;
    let answer = oauth::decide(
        browser,
        &app.base,
        &page,
        project,
        &["osfoundry:read", "osfoundry:run"],
        "allow",
    )
    .await;
    (answer.redirect_param("code").expect("code"), pkce)
}

#[tokio::test]
async fn pkce_is_required_and_only_s256_with_the_right_verifier_passes() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let browser = Browser::new();
    let (code_text, pkce) = code(&browser, &app, &project).await;
    let exchange = |pairs: Vec<(&'static str, String)>| {
        let app = app.clone();
        async move {
            let mut form: Vec<(&str, &str)> = vec![("grant_type", "authorization_code")];
            form.extend(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            app.token(&form).await
        }
    };
    let (status, missing) = exchange(vec![("code", code_text.clone())]).await;
    assert_eq!(
        (status, missing["error"].as_str()),
        (400, Some("invalid_grant")),
        "{missing}"
    );
    let (status, plain) = exchange(vec![
        ("code", code_text.clone()),
        ("code_verifier", pkce.challenge.clone()),
    ])
    .await;
    assert_eq!(
        (status, plain["error"].as_str()),
        (400, Some("invalid_grant")),
        "the challenge itself (plain) is no verifier"
    );
    let wrong = oauth::pkce();
    let (status, wrong) = exchange(vec![
        ("code", code_text.clone()),
        ("code_verifier", wrong.verifier),
    ])
    .await;
    assert_eq!(
        (status, wrong["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let (status, tokens) = app.exchange(&code_text, &pkce.verifier).await;
    assert_eq!(
        status, 200,
        "failed attempts do not burn the code for its owner: {tokens}"
    );

    // The authorization request itself refuses plain and missing challenges, by redirect.
    let page = browser
        .get(
            &app.authorize_url(&pkce.challenge, "s", &[])
                .replace("code_challenge_method=S256", "code_challenge_method=plain"),
        )
        .await;
    assert_eq!(page.status, 303);
    assert_eq!(
        page.redirect_param("error").as_deref(),
        Some("invalid_request")
    );
    assert_eq!(page.redirect_param("state").as_deref(), Some("s"));
    let no_challenge = app
        .authorize_url("x", "s", &[])
        .replace("code_challenge=x&", "");
    let page = browser.get(&no_challenge).await;
    assert_eq!(
        page.redirect_param("error").as_deref(),
        Some("invalid_request")
    );
}

#[tokio::test]
async fn a_code_used_twice_is_refused_and_kills_its_tokens() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let browser = Browser::new();
    let (code_text, pkce) = code(&browser, &app, &project).await;
    let (status, tokens) = app.exchange(&code_text, &pkce.verifier).await;
    assert_eq!(status, 200);
    let access = tokens["access_token"].as_str().expect("access");
    assert_eq!(oauth::mcp_status(&service.base, access).await, 200);
    let (status, again) = app.exchange(&code_text, &pkce.verifier).await;
    assert_eq!(
        (status, again["error"].as_str()),
        (400, Some("invalid_grant")),
        "{again}"
    );
    assert_eq!(
        oauth::mcp_status(&service.base, access).await,
        401,
        "the first exchange's token is dead"
    );
    let (status, refreshed) = app
        .refresh(tokens["refresh_token"].as_str().expect("refresh"))
        .await;
    assert_eq!(
        (status, refreshed["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let listed = connections::list(service.app.store.as_ref(), None, None)
        .await
        .expect("list");
    assert!(listed[0].revoked_at.is_some(), "{listed:?}");
}

#[tokio::test]
async fn a_code_expires_after_a_minute_and_belongs_to_its_client() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let other = oauth::register(&service.base, "Other").await;
    let browser = Browser::new();
    let (code_text, pkce) = code(&browser, &app, &project).await;
    let (status, stolen) = other.exchange(&code_text, &pkce.verifier).await;
    assert_eq!(
        (status, stolen["error"].as_str()),
        (400, Some("invalid_grant")),
        "{stolen}"
    );
    service.clock.advance(Duration::from_secs(61));
    let (status, late) = app.exchange(&code_text, &pkce.verifier).await;
    assert_eq!(
        (status, late["error"].as_str()),
        (400, Some("invalid_grant")),
        "{late}"
    );
}

#[tokio::test]
async fn an_unregistered_redirect_uri_gets_a_page_and_no_redirect() {
    let (service, _) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let url = app
        .authorize_url(&pkce.challenge, "s", &[])
        .replace("127.0.0.1%3A9%2Fcallback", "evil.example%2Fcallback");
    assert!(url.contains("evil.example"), "{url}");
    let page = browser.get(&url).await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.location.is_none(), "never redirected");
    assert!(
        page.body.contains("not one that App registered"),
        "{}",
        page.body
    );
    // An unknown client is a page too.
    let page = browser
        .get(&url.replace(&app.client_id, "grc_forged"))
        .await;
    assert_eq!((page.status, page.location.is_none()), (400, true));
    // A loopback redirect URI may change its port, nothing else.
    let moved = app
        .authorize_url(&pkce.challenge, "s", &[])
        .replace("127.0.0.1%3A9%2F", "127.0.0.1%3A5555%2F");
    let page = browser.get(&moved).await;
    assert_eq!(
        page.status, 200,
        "another loopback port is fine: {}",
        page.body
    );
}

#[tokio::test]
async fn registration_refuses_bad_metadata() {
    let (service, _) = service().await;
    for (body, error) in [
        (
            json!({"redirect_uris": ["http://example.com/cb"]}),
            "invalid_redirect_uri",
        ),
        (
            json!({"redirect_uris": ["https://a.example/cb#x"]}),
            "invalid_redirect_uri",
        ),
        (json!({"redirect_uris": []}), "invalid_redirect_uri"),
        (
            json!({"redirect_uris": vec!["https://a.example/cb"; 11]}),
            "invalid_redirect_uri",
        ),
        (json!({"client_name": "x"}), "invalid_redirect_uri"),
        (
            json!({"redirect_uris": ["https://a.example/cb"], "grant_types": ["client_credentials"]}),
            "invalid_client_metadata",
        ),
        (
            json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt"}),
            "invalid_client_metadata",
        ),
        (
            json!({"redirect_uris": ["https://a.example/cb"], "scope": "admin"}),
            "invalid_client_metadata",
        ),
        (json!(["not an object"]), "invalid_client_metadata"),
    ] {
        let (status, answer) = oauth::register_raw(&service.base, &body).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (400, Some(error)),
            "{body}: {answer}"
        );
    }
}

#[tokio::test]
async fn an_unused_registration_expires_after_a_day() {
    let (service, _) = service().await;
    let app = oauth::register(&service.base, "App").await;
    service.clock.advance(Duration::from_secs(24 * 3600 + 1));
    let pkce = oauth::pkce();
    let page = Browser::new()
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("register again"), "{}", page.body);
}

#[tokio::test]
async fn a_rotated_refresh_token_presented_again_revokes_the_grant() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let tokens = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    let (status, first) = app.refresh(&tokens.refresh).await;
    assert_eq!(status, 200);
    let newest_access = first["access_token"].as_str().expect("access").to_owned();
    let newest_refresh = first["refresh_token"].as_str().expect("refresh").to_owned();
    assert_eq!(oauth::mcp_status(&service.base, &newest_access).await, 200);
    let (status, replay) = app.refresh(&tokens.refresh).await;
    assert_eq!(
        (status, replay["error"].as_str()),
        (400, Some("invalid_grant")),
        "{replay}"
    );
    assert_eq!(
        oauth::mcp_status(&service.base, &newest_access).await,
        401,
        "the whole grant is revoked"
    );
    let (status, _) = app.refresh(&newest_refresh).await;
    assert_eq!(status, 400, "its newest refresh token too");
}

#[tokio::test]
async fn consent_without_the_csrf_token_is_refused() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = oauth::consent_page(&browser, &app, &pkce, "s", "ann", PASSWORD).await;
    let authorization = page.input("authorization").expect("request");
    for csrf in [None, Some("0123456789abcdef0123456789abcdef")] {
        let mut pairs = vec![
            ("authorization", authorization.as_str()),
            ("project", project.as_str()),
            ("scope", "osfoundry:read"),
            ("decision", "allow"),
        ];
        if let Some(csrf) = csrf {
            pairs.push(("csrf", csrf));
        }
        let answer = browser
            .post_form(&format!("{}/oauth/authorize", service.base), &pairs)
            .await;
        assert_eq!(answer.status, 403, "{}", answer.body);
        assert!(answer.location.is_none());
    }
    // The sign-in form needs its token (and the cookie it was set with) as well.
    let fresh = Browser::new();
    let signin_page = fresh
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    let other = Browser::new();
    let forged = oauth::sign_in(&other, &service.base, &signin_page, "ann", PASSWORD).await;
    assert_eq!(
        forged.status, 403,
        "a CSRF token without its cookie: {}",
        forged.body
    );
    assert!(
        connections::list(service.app.store.as_ref(), None, None)
            .await
            .expect("list")
            .is_empty()
    );
}

#[tokio::test]
async fn owner_b_cannot_grant_owner_as_project() {
    let (service, ann_project) = service().await;
    service.project("Bea's", "bea").await;
    admin::set_owner_password(&service.app.admin(), "bea", "another long password".into())
        .await
        .expect("password");
    let app = oauth::register(&service.base, "App").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page =
        oauth::consent_page(&browser, &app, &pkce, "s", "bea", "another long password").await;
    assert!(
        !page.body.contains(&ann_project),
        "ann's project is not offered to bea"
    );
    let answer = oauth::decide(
        &browser,
        &service.base,
        &page,
        &ann_project,
        &["osfoundry:read"],
        "allow",
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(answer.location.is_none());
    assert!(
        connections::list(service.app.store.as_ref(), None, None)
            .await
            .expect("list")
            .is_empty(),
        "nothing granted"
    );
}

#[tokio::test]
async fn deny_redirects_with_access_denied_and_grants_nothing() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = oauth::consent_page(&browser, &app, &pkce, "st", "ann", PASSWORD).await;
    let answer = oauth::decide(
        &browser,
        &service.base,
        &page,
        &project,
        &["osfoundry:read"],
        "deny",
    )
    .await;
    assert_eq!(answer.status, 303);
    assert_eq!(
        answer.redirect_param("error").as_deref(),
        Some("access_denied")
    );
    assert_eq!(answer.redirect_param("state").as_deref(), Some("st"));
    assert!(answer.redirect_param("code").is_none());
    assert!(
        connections::list(service.app.store.as_ref(), None, None)
            .await
            .expect("list")
            .is_empty()
    );
}

async fn owner_token(service: &TestService, project: &str) -> String {
    admin::create_token(&service.app.admin(), project, admin::TokenSpec::Owner)
        .await
        .expect("owner token")
        .token
}

#[tokio::test]
async fn a_revoked_connection_gets_401_on_its_next_call() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let tokens = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 200);
    // Through the owner API: another owner's token cannot see or revoke it.
    service.project("Bea's", "bea").await;
    let ann_owner = owner_token(&service, &project).await;
    let bea_project = admin::list_projects(&service.app.admin())
        .await
        .expect("projects")
        .into_iter()
        .find(|p| p.owner == "bea")
        .expect("bea")
        .project_id;
    let bea_owner = owner_token(&service, &bea_project).await;
    let http = http_client();
    let list = |token: String| {
        let http = http.clone();
        let base = service.base.clone();
        async move {
            let response = http
                .get(format!("{base}/owner/v1/connections"))
                .bearer_auth(token)
                .send()
                .await
                .expect("answered");
            crate::common::decode(response).await
        }
    };
    let (status, bea_sees) = list(bea_owner.clone()).await;
    assert_eq!(
        (status, bea_sees["connections"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    let (_, ann_sees) = list(ann_owner.clone()).await;
    let id = ann_sees["connections"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(ann_sees["connections"][0]["client_name"], "App");
    let revoke = |token: String| {
        let http = http.clone();
        let url = format!("{}/owner/v1/connections/{id}/revoke", service.base);
        async move {
            let response = http
                .post(url)
                .bearer_auth(token)
                .send()
                .await
                .expect("answered");
            crate::common::decode(response).await
        }
    };
    let (status, _) = revoke(bea_owner).await;
    assert_eq!(status, 404, "another owner's connection answers as missing");
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 200);
    let (status, revoked) = revoke(ann_owner).await;
    assert_eq!(
        (status, revoked["revoked"].as_bool()),
        (200, Some(true)),
        "{revoked}"
    );
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 401);
    let (status, _) = app.refresh(&tokens.refresh).await;
    assert_eq!(status, 400, "and it cannot refresh its way back");
}

#[tokio::test]
async fn the_revocation_endpoint_ends_a_grant() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let tokens = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    let other = oauth::register(&service.base, "Other").await;
    let revoke = |client: &oauth::App, token: &str| {
        let body = oauth::form_body(&[("client_id", &client.client_id), ("token", token)]);
        let url = format!("{}/oauth/revoke", service.base);
        async move {
            http_client()
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .expect("answered")
                .status()
                .as_u16()
        }
    };
    assert_eq!(
        revoke(&other, &tokens.refresh).await,
        200,
        "answered like any token"
    );
    assert_eq!(
        oauth::mcp_status(&service.base, &tokens.access).await,
        200,
        "but another client cannot revoke it"
    );
    assert_eq!(revoke(&app, &tokens.refresh).await, 200);
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 401);
}

#[tokio::test]
async fn twenty_wrong_passwords_are_throttled_and_the_right_one_still_works() {
    let (service, _) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = browser
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for n in 0..20 {
        let answer = oauth::sign_in(
            &browser,
            &service.base,
            &page,
            "ann",
            &format!("wrong password {n}"),
        )
        .await;
        statuses.push(answer.status);
        if answer.status == 429 {
            retry_after = answer.retry_after.or(retry_after);
        }
    }
    assert_eq!(&statuses[..5], [401; 5], "{statuses:?}");
    assert!(statuses.contains(&429), "throttled: {statuses:?}");
    let wait = retry_after.expect("429 says when to retry");
    let early = oauth::sign_in(&browser, &service.base, &page, "ann", PASSWORD).await;
    assert_eq!(
        early.status, 429,
        "during the wait even the right password waits"
    );
    service.clock.advance(Duration::from_secs(wait));
    let right = oauth::sign_in(&browser, &service.base, &page, "ann", PASSWORD).await;
    assert_eq!(
        right.status, 303,
        "after the delay the owner gets in: {}",
        right.body
    );
}

/// The second red team's lockout (issue 44): someone who knows the owner's name guesses a
/// password every 0.2 s for 30 s from 5 changing addresses. The guessing addresses are
/// throttled; the owner, signing in from an address that never failed, gets in every time.
#[tokio::test]
async fn guesses_from_changing_addresses_do_not_lock_the_owner_out() {
    let (service, _) = service().await;
    let app = oauth::register(&service.base, "App").await;
    let pkce = oauth::pkce();
    let authorize = app.authorize_url(&pkce.challenge, "s", &[]);
    let mut attackers = Vec::new();
    for n in 0..5u8 {
        let browser = Browser::from_address(std::net::IpAddr::from([127, 0, 0, 10 + n]));
        let page = browser.get(&authorize).await;
        attackers.push((browser, page));
    }
    let owner = Browser::from_address(std::net::IpAddr::from([127, 0, 0, 2]));
    let mut guesses = Vec::new();
    let mut owner_tries = Vec::new();
    for n in 0..150usize {
        let (browser, page) = &attackers[n % attackers.len()];
        let guess =
            oauth::sign_in(browser, &service.base, page, "ann", &format!("guess {n}")).await;
        guesses.push(guess.status);
        service.clock.advance(Duration::from_millis(200));
        if n % 25 == 24 {
            owner.clear_cookies();
            let fresh = owner.get(&authorize).await;
            let right = oauth::sign_in(&owner, &service.base, &fresh, "ann", PASSWORD).await;
            owner_tries.push(right.status);
        }
    }
    assert!(
        guesses.iter().all(|s| matches!(s, 401 | 429)) && guesses.contains(&429),
        "the guessing addresses are throttled: {guesses:?}"
    );
    assert_eq!(
        owner_tries, [303; 6],
        "the owner gets in from a clean address throughout the attack"
    );
}

#[tokio::test]
async fn metadata_documents_on_internal_addresses_are_refused() {
    let (service, _) = service().await;
    let pkce = oauth::pkce();
    let app = oauth::App {
        base: service.base.clone(),
        client_id: "https://127.0.0.1:1/client.json".into(),
        client_secret: None,
        redirect_uri: "https://app.example/cb".into(),
    };
    let page = Browser::new()
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(
        page.body.contains("loopback, private or link-local"),
        "{}",
        page.body
    );
    assert!(page.location.is_none());
}

#[tokio::test]
async fn a_metadata_document_client_connects_in_dev_mode() {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/client.json",
        listener.local_addr().expect("addr")
    );
    let document = json!({
        "client_id": url,
        "client_name": "Doc client",
        "redirect_uris": ["http://127.0.0.1:9/callback"],
        "token_endpoint_auth_method": "none",
    });
    let served = document.clone();
    let router = axum::Router::new().route(
        "/client.json",
        get(move || async move { axum::Json(served) }),
    );
    tokio::spawn(async move { axum::serve(listener, router).await });
    let service = TestService::start_with_config(relay_service::ServiceConfig {
        dev: true,
        ..relay_service::ServiceConfig::default()
    })
    .await;
    let project = service.project("Notes", "ann").await;
    admin::set_owner_password(&service.app.admin(), "ann", PASSWORD.into())
        .await
        .expect("password");
    let app = oauth::App {
        base: service.base.clone(),
        client_id: url.clone(),
        client_secret: None,
        redirect_uri: "http://127.0.0.1:9/callback".into(),
    };
    let tokens = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 200);
    let listed = connections::list(service.app.store.as_ref(), None, None)
        .await
        .expect("list");
    assert_eq!(
        (listed[0].client_name.as_str(), listed[0].client_id.as_str()),
        ("Doc client", url.as_str())
    );
}

#[tokio::test]
async fn registrations_from_one_address_are_rate_limited() {
    let (service, _) = service().await;
    let body = json!({"client_name": "Spam", "redirect_uris": ["https://a.example/cb"]});
    let mut statuses = Vec::new();
    for _ in 0..30 {
        let response = http_client()
            .post(format!("{}/oauth/register", service.base))
            .json(&body)
            .send()
            .await
            .expect("answered");
        let retry_after = response.headers().get("retry-after").is_some();
        statuses.push((response.status().as_u16(), retry_after));
    }
    assert!(
        statuses[..20].iter().all(|s| *s == (201, false)),
        "a burst of 20 is fine: {statuses:?}"
    );
    assert!(
        statuses.contains(&(429, true)),
        "then 429 with Retry-After: {statuses:?}"
    );
}
