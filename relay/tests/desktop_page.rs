//! `relay desktop ui`: the binary serves the desktop page on loopback only, prints one link with
//! a one-time token on stdout, and that link signs in one browser once.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use relay_testkit::desktop_page::{PageClient, http_client};

/// `relay desktop --state STATE ui ARGS…`, stdout piped.
fn desktop_ui(state: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["desktop", "--state"])
        .arg(state)
        .arg("ui")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run relay")
}

/// Ends the page's process when the test ends, passing or not.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desktop_ui_prints_a_one_time_link_on_loopback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Running(desktop_ui(&dir.path().join("desktop.db"), &[]));
    let stdout = child.0.stdout.take().expect("stdout");
    let url = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("a line");
        line.trim().to_owned()
    })
    .await
    .expect("read");
    let rest = url.strip_prefix("http://127.0.0.1:").expect(&url);
    let (port, token) = rest.split_once("/?token=").expect(&url);
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{url}");
    assert!(
        token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{url}"
    );
    let origin = format!("http://127.0.0.1:{port}");
    let http = http_client();
    let anonymous = http.get(format!("{origin}/")).send().await.expect("answer");
    assert_eq!(anonymous.status().as_u16(), 401);
    let client = PageClient::open(&url).await;
    let home = client.get("/").await;
    assert_eq!(home.status, 200);
    assert!(home.body.contains("Graph sessions"), "{}", home.body);
    let again = http.get(&url).send().await.expect("answer");
    assert_eq!(again.status().as_u16(), 401, "the link works once");
    let enabled = client
        .post("/", "/projects", &[("project", "p1"), ("enabled", "true")])
        .await;
    assert_eq!(enabled.status, 303, "{}", enabled.body);
    let listed = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["desktop", "--state"])
        .arg(dir.path().join("desktop.db"))
        .args(["project", "list"])
        .output()
        .expect("run relay");
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        "p1  enabled",
        "the CLI sees the page's change in the same state file"
    );
}

#[test]
fn desktop_ui_refuses_a_listen_address_that_is_not_loopback() {
    let dir = tempfile::tempdir().expect("tempdir");
    for listen in ["0.0.0.0:0", "192.0.2.1:8888", "[::]:0"] {
        let output = desktop_ui(&dir.path().join("desktop.db"), &["--listen", listen])
            .wait_with_output()
            .expect("run relay");
        assert!(!output.status.success(), "{listen} was taken");
        assert!(output.stdout.is_empty(), "no link is printed");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("not a loopback address") && stderr.contains("127.0.0.1:PORT"),
            "{stderr}"
        );
    }
}
