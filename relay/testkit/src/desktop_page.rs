//! A client of `relay desktop ui`'s page that talks HTTP as a browser would: it opens the
//! one-time link, keeps the session cookie, and posts forms with the CSRF token the page's
//! forms carry, with the page's own `Origin`. Redirects are not followed, so a test sees them.

/// The session cookie's name prefix (the port follows).
const COOKIE_PREFIX: &str = "relay_desktop_";

/// A signed-in client of one desktop page.
pub struct PageClient {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    /// `NAME=VALUE` of the session cookie.
    pub cookie: String,
}

/// A page's answer.
#[derive(Debug)]
pub struct PageAnswer {
    /// The status code.
    pub status: u16,
    /// `Location`, if any.
    pub location: Option<String>,
    /// The body.
    pub body: String,
}

/// A client that follows no redirects and uses no proxy.
pub fn http_client() -> reqwest::Client {
    graphrelay_net::client_builder()
        .and_then(|b| {
            graphrelay_net::build(b.no_proxy().redirect(reqwest::redirect::Policy::none()))
        })
        .expect("an HTTP client")
}

impl PageClient {
    /// Opens `url` (the link `relay desktop ui` printed) and keeps the cookie it sets.
    pub async fn open(url: &str) -> PageClient {
        let http = http_client();
        let origin = url.split("/?").next().expect("a link").to_owned();
        let response = http.get(url).send().await.expect("the link answers");
        assert_eq!(
            response.status().as_u16(),
            303,
            "the link redirects to the page"
        );
        let cookie = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with(COOKIE_PREFIX))
            .and_then(|v| v.split(';').next())
            .expect("the link sets the session cookie")
            .to_owned();
        PageClient {
            http,
            origin,
            cookie,
        }
    }

    async fn answer(response: reqwest::Response) -> PageAnswer {
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.text().await.expect("a body");
        PageAnswer {
            status,
            location,
            body,
        }
    }

    /// `GET path` with the cookie.
    pub async fn get(&self, path: &str) -> PageAnswer {
        let response = self
            .http
            .get(format!("{}{path}", self.origin))
            .header("cookie", &self.cookie)
            .send()
            .await
            .expect("the page answers");
        Self::answer(response).await
    }

    /// The CSRF token of the forms on `path`.
    pub async fn csrf(&self, path: &str) -> String {
        let page = self.get(path).await.body;
        form_value(&page, "csrf").expect("the page has a form with a CSRF token")
    }

    /// Posts `fields` to `path` with the CSRF token of the forms on `from`.
    pub async fn post(&self, from: &str, path: &str, fields: &[(&str, &str)]) -> PageAnswer {
        let csrf = self.csrf(from).await;
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("csrf", &csrf);
        for (name, value) in fields {
            form.append_pair(name, value);
        }
        let response = self
            .http
            .post(format!("{}{path}", self.origin))
            .header("cookie", &self.cookie)
            .header("origin", &self.origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.finish())
            .send()
            .await
            .expect("the page answers");
        Self::answer(response).await
    }
}

/// The `value` of the first hidden input called `name` in `page`.
pub fn form_value(page: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page.find(&marker)? + marker.len();
    let end = page[start..].find('"')? + start;
    Some(page[start..end].to_owned())
}
