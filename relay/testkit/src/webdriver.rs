//! Headless Chromium driven over W3C WebDriver, as a person uses a page: fields are found by the
//! text of their `<label>`, buttons by their text. A small client of chromedriver's JSON API over
//! reqwest; [`Chromium::start`] runs its own chromedriver on a free loopback port and a fresh
//! profile, and dropping the [`Chromium`] ends both.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// The key under which WebDriver names an element (W3C WebDriver, "Elements").
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long chromedriver may take to answer `/status` after it starts, in polls of [`POLL`].
const DRIVER_START_POLLS: u32 = 200;
/// How long [`Chromium::wait_for_url`] waits, in polls of [`POLL`].
const URL_WAIT_POLLS: u32 = 200;
const POLL: Duration = Duration::from_millis(50);
/// How long a lookup waits for its element to appear (WebDriver's implicit wait).
const IMPLICIT_WAIT_MS: u64 = 5_000;
/// How long one page load may take.
const PAGE_LOAD_MS: u64 = 30_000;
/// How long a drop waits for chromedriver to close the browser of a session left open.
const SESSION_END_WAIT: Duration = Duration::from_secs(10);
/// The most of chromedriver's log a start failure quotes.
const LOG_TAIL_CHARS: usize = 2_000;

/// What went wrong talking to chromedriver or the browser.
#[derive(Debug)]
pub struct WebDriverError(pub String);

impl std::fmt::Display for WebDriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WebDriverError {}

type Result<T> = std::result::Result<T, WebDriverError>;

fn fail(what: impl std::fmt::Display) -> WebDriverError {
    WebDriverError(what.to_string())
}

/// An element of the current page, as WebDriver names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element(pub String);

/// The chromedriver on `PATH` (or `GRAPHRELAY_CHROMEDRIVER`), if there is one.
pub fn chromedriver() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GRAPHRELAY_CHROMEDRIVER") {
        return Some(PathBuf::from(path));
    }
    on_path("chromedriver")
}

/// The Chromium binary chromedriver is told to start: `GRAPHRELAY_CHROMIUM`, else the first of
/// Debian's `chromium` and its other usual names on `PATH`; `None` leaves it to chromedriver.
fn chromium_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GRAPHRELAY_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find_map(on_path)
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A headless Chromium session and the chromedriver that runs it.
pub struct Chromium {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    driver: Child,
    profile: tempfile::TempDir,
}

impl Chromium {
    /// Starts chromedriver on a free loopback port and opens a headless session with a fresh
    /// profile (`--headless=new --no-sandbox --disable-dev-shm-usage`).
    pub async fn start() -> Result<Chromium> {
        let driver_binary = chromedriver().ok_or_else(|| fail("chromedriver is not on PATH"))?;
        let profile = tempfile::tempdir().map_err(|e| fail(format!("temp profile: {e}")))?;
        let port = free_port()?;
        let log = profile.path().join("chromedriver.log");
        let driver = Command::new(&driver_binary)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| fail(format!("cannot start {}: {e}", driver_binary.display())))?;
        // No proxy: chromedriver is on loopback, whatever the environment says.
        let http = graphrelay_net::client_builder()
            .and_then(|b| graphrelay_net::build(b.no_proxy()))
            .map_err(fail)?;
        let mut chromium = Chromium {
            http,
            session: String::new(),
            driver,
            profile,
        };
        let base = format!("http://127.0.0.1:{port}");
        chromium.wait_for_driver(&base, &log).await?;
        let session = chromium.new_session(&base).await;
        chromium.session = format!("{base}/session/{}", session.map_err(|e| with_log(e, &log))?);
        chromium
            .command(
                "POST",
                "/timeouts",
                json!({"implicit": IMPLICIT_WAIT_MS, "pageLoad": PAGE_LOAD_MS}),
            )
            .await?;
        Ok(chromium)
    }

    async fn wait_for_driver(&mut self, base: &str, log: &Path) -> Result<()> {
        for _ in 0..DRIVER_START_POLLS {
            if let Ok(Some(status)) = self.driver.try_wait() {
                return Err(with_log(
                    fail(format!("chromedriver exited: {status}")),
                    log,
                ));
            }
            let ready = match self.http.get(format!("{base}/status")).send().await {
                Ok(response) => response
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        Err(with_log(fail("chromedriver did not become ready"), log))
    }

    async fn new_session(&self, base: &str) -> Result<String> {
        let user_data = format!(
            "--user-data-dir={}",
            self.profile.path().join("profile").display()
        );
        let mut options = json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--no-first-run", "--no-default-browser-check", user_data],
        });
        if let Some(binary) = chromium_binary() {
            options["binary"] = json!(binary.display().to_string());
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "goog:chromeOptions": options,
        }}});
        let value = self
            .send("POST", &format!("{base}/session"), Some(capabilities))
            .await?;
        value["sessionId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| fail(format!("new session answered without a sessionId: {value}")))
    }

    /// Loads `url` and waits until it has loaded.
    pub async fn goto(&self, url: &str) -> Result<()> {
        self.command("POST", "/url", json!({"url": url}))
            .await
            .map(drop)
    }

    /// The current page's URL.
    pub async fn url(&self) -> Result<String> {
        let value = self.get("/url").await?;
        value
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| fail(format!("the URL is not a string: {value}")))
    }

    /// The current page's HTML as the browser now holds it.
    pub async fn source(&self) -> Result<String> {
        let value = self.get("/source").await?;
        value
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| fail(format!("the source is not a string: {value}")))
    }

    /// Waits until the current URL satisfies `done`; returns it.
    pub async fn wait_for_url(&self, done: impl Fn(&str) -> bool) -> Result<String> {
        let mut last = String::new();
        for _ in 0..URL_WAIT_POLLS {
            last = self.url().await?;
            if done(&last) {
                return Ok(last);
            }
            tokio::time::sleep(POLL).await;
        }
        Err(fail(format!("the page stayed at {last}")))
    }

    /// The form control a `<label>` whose text is `label` points at with its `for`.
    pub async fn field(&self, label: &str) -> Result<Element> {
        let text = xpath_literal(label);
        self.find(&format!("//*[@id=//label[normalize-space(.)={text}]/@for]"))
            .await
            .map_err(|e| fail(format!("no field labelled {label:?}: {e}")))
    }

    /// The button (a `<button>` or a submit `<input>`) whose text is `text`.
    pub async fn button(&self, text: &str) -> Result<Element> {
        let literal = xpath_literal(text);
        self.find(&format!(
            "//button[normalize-space(.)={literal}] | \
             //input[(@type='submit' or @type='button') and @value={literal}]"
        ))
        .await
        .map_err(|e| fail(format!("no button {text:?}: {e}")))
    }

    /// Types `text` into the field labelled `label`.
    pub async fn type_into(&self, label: &str, text: &str) -> Result<()> {
        let field = self.field(label).await?;
        self.element_command(&field, "/value", json!({"text": text}))
            .await
            .map(drop)
    }

    /// Picks the option whose visible text is `text` in the `<select>` labelled `label`.
    pub async fn select(&self, label: &str, text: &str) -> Result<()> {
        let select = self.field(label).await?;
        let xpath = format!(".//option[normalize-space(.)={}]", xpath_literal(text));
        let value = self
            .element_command(
                &select,
                "/element",
                json!({"using": "xpath", "value": xpath}),
            )
            .await
            .map_err(|e| fail(format!("{label:?} has no option {text:?}: {e}")))?;
        self.click(&element(&value)?).await
    }

    /// Clicks the button whose text is `text`.
    pub async fn click_button(&self, text: &str) -> Result<()> {
        let button = self.button(text).await?;
        self.click(&button).await
    }

    /// Clicks `element`.
    pub async fn click(&self, element: &Element) -> Result<()> {
        self.element_command(element, "/click", json!({}))
            .await
            .map(drop)
    }

    /// Whether the checkbox, radio button or option `element` is selected.
    pub async fn is_selected(&self, element: &Element) -> Result<bool> {
        let value = self
            .get(&format!("/element/{}/selected", element.0))
            .await?;
        value
            .as_bool()
            .ok_or_else(|| fail(format!("selected is not a boolean: {value}")))
    }

    /// The current value of a form control (its `value` property).
    pub async fn value(&self, element: &Element) -> Result<String> {
        let value = self
            .get(&format!("/element/{}/property/value", element.0))
            .await?;
        Ok(value.as_str().unwrap_or_default().to_owned())
    }

    /// Sets the window's outer size in CSS pixels (the page's layout width follows).
    pub async fn set_window_size(&self, width: u32, height: u32) -> Result<()> {
        self.command(
            "POST",
            "/window/rect",
            json!({"width": width, "height": height}),
        )
        .await
        .map(drop)
    }

    /// A PNG screenshot of the viewport (WebDriver's base64 answer, decoded).
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        use base64::Engine;
        let value = self.get("/screenshot").await?;
        let text = value
            .as_str()
            .ok_or_else(|| fail("the screenshot is not a string"))?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| fail(format!("the screenshot is not base64: {e}")))
    }

    /// Saves a screenshot as `path` (its folder made if missing).
    pub async fn save_screenshot(&self, path: &Path) -> Result<()> {
        let png = self.screenshot().await?;
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder)
                .map_err(|e| fail(format!("{}: {e}", folder.display())))?;
        }
        std::fs::write(path, png).map_err(|e| fail(format!("{}: {e}", path.display())))
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page; its return value.
    pub async fn execute(&self, script: &str, args: Value) -> Result<Value> {
        self.command(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// Double-clicks `element` with the pointer, as a person does: two clicks in a row.
    pub async fn double_click(&self, element: &Element) -> Result<()> {
        let origin = json!({ELEMENT_KEY: element.0});
        let actions = json!({"actions": [{
            "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [
                {"type": "pointerMove", "origin": origin, "x": 0, "y": 0},
                {"type": "pointerDown", "button": 0}, {"type": "pointerUp", "button": 0},
                {"type": "pointerDown", "button": 0}, {"type": "pointerUp", "button": 0},
            ],
        }]});
        self.command("POST", "/actions", actions).await.map(drop)
    }

    /// Ends the session (the browser closes); chromedriver ends when this is dropped.
    pub async fn quit(mut self) -> Result<()> {
        let ended = self.send("DELETE", &self.session, None).await.map(drop);
        self.session.clear();
        ended
    }

    async fn find(&self, xpath: &str) -> Result<Element> {
        let value = self
            .command(
                "POST",
                "/element",
                json!({"using": "xpath", "value": xpath}),
            )
            .await?;
        element(&value)
    }

    async fn element_command(&self, element: &Element, what: &str, body: Value) -> Result<Value> {
        self.command("POST", &format!("/element/{}{what}", element.0), body)
            .await
    }

    async fn get(&self, path: &str) -> Result<Value> {
        self.send("GET", &format!("{}{path}", self.session), None)
            .await
    }

    async fn command(&self, method: &str, path: &str, body: Value) -> Result<Value> {
        self.send(method, &format!("{}{path}", self.session), Some(body))
            .await
    }

    /// One WebDriver request; its `value`, or the error WebDriver answered with.
    async fn send(&self, method: &str, url: &str, body: Option<Value>) -> Result<Value> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(fail)?;
        let mut request = self.http.request(method.clone(), url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| fail(format!("{method} {url}: {e}")))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| fail(format!("{method} {url}: not JSON: {e}")))?;
        if !status.is_success() {
            let error = &body["value"];
            return Err(fail(format!(
                "{method} {url}: {status}: {} ({})",
                error["error"].as_str().unwrap_or("?"),
                error["message"]
                    .as_str()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
            )));
        }
        Ok(body["value"].clone())
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // Killing chromedriver would leave the browser running: a test that fails before
        // `quit` still ends its session, blocking, as the drop cannot wait on async code.
        if !self.session.is_empty() {
            let _ = end_session_blocking(&self.session);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `DELETE {session}` over a plain socket, with the answer awaited for at most
/// [`SESSION_END_WAIT`].
fn end_session_blocking(session: &str) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let rest = session.strip_prefix("http://").unwrap_or(session);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(host)?;
    stream.set_read_timeout(Some(SESSION_END_WAIT))?;
    stream.set_write_timeout(Some(SESSION_END_WAIT))?;
    write!(
        stream,
        "DELETE /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    // The browser has closed when chromedriver answers; the answer itself says nothing more.
    let mut answer = [0_u8; 1024];
    let _ = stream.read(&mut answer)?;
    Ok(())
}

fn element(value: &Value) -> Result<Element> {
    value[ELEMENT_KEY]
        .as_str()
        .map(|id| Element(id.to_owned()))
        .ok_or_else(|| fail(format!("not an element: {value}")))
}

/// A free loopback port: bound, read and released, for chromedriver to take.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| fail(format!("no free port: {e}")))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|e| fail(format!("no free port: {e}")))
}

fn with_log(error: WebDriverError, log: &Path) -> WebDriverError {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let start = text
        .char_indices()
        .rev()
        .nth(LOG_TAIL_CHARS)
        .map_or(0, |(i, _)| i);
    fail(format!(
        "{error}; chromedriver's log ends: {}",
        &text[start..]
    ))
}

/// `text` as an XPath 1.0 string literal, which has no escapes: quotes of one kind are wrapped
/// in the other, and text with both is spliced with `concat`.
pub fn xpath_literal(text: &str) -> String {
    if !text.contains('\'') {
        format!("'{text}'")
    } else if !text.contains('"') {
        format!("\"{text}\"")
    } else {
        let parts: Vec<String> = text.split('\'').map(|part| format!("'{part}'")).collect();
        format!("concat({})", parts.join(", \"'\", "))
    }
}

#[cfg(test)]
mod tests {
    use super::xpath_literal;

    #[test]
    fn xpath_literals_quote_any_text() {
        assert_eq!(xpath_literal("Owner name"), "'Owner name'");
        assert_eq!(xpath_literal("Bob's"), "\"Bob's\"");
        assert_eq!(xpath_literal("a'b\"c"), "concat('a', \"'\", 'b\"c')");
    }
}
