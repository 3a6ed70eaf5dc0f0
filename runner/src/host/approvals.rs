//! Per-tool approval policy: `allow`, `ask` or `deny`. A tool without a policy is denied. `ask`
//! goes to an [`Approver`] (a terminal prompt, the desktop's pending-approval queue) and a
//! missing answer within the timeout is a denial. Enforced here, on the host; nothing a script
//! does can skip it.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, IsTerminal, Write};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use graph_js::Failure;
use tokio_util::sync::CancellationToken;

/// How long an `ask` waits for the owner by default before it counts as a denial.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// What happens when a graph calls a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Runs without asking.
    Allow,
    /// Asks the owner each time.
    Ask,
    /// Refused.
    Deny,
}

impl Policy {
    /// The policy's name as written in flags and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Allow => "allow",
            Policy::Ask => "ask",
            Policy::Deny => "deny",
        }
    }
}

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Policy::Allow),
            "ask" => Ok(Policy::Ask),
            "deny" => Ok(Policy::Deny),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// A policy name that is none of `allow`, `ask` and `deny`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy `{0}`: use allow, ask or deny")]
pub struct UnknownPolicy(pub String);

/// The policy per tool name. Tools not listed are denied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalPolicy {
    tools: BTreeMap<String, Policy>,
}

impl ApprovalPolicy {
    /// Sets `tool`'s policy (a later setting for the same tool wins).
    pub fn set(&mut self, tool: impl Into<String>, policy: Policy) -> &mut Self {
        self.tools.insert(tool.into(), policy);
        self
    }

    /// The policy that applies to `tool`.
    pub fn get(&self, tool: &str) -> Policy {
        self.tools.get(tool).copied().unwrap_or(Policy::Deny)
    }

    /// Every tool with an explicit policy.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Policy)> {
        self.tools.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

/// One question to the owner.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ApprovalRequest {
    /// The run asking.
    pub run_id: String,
    /// The tool.
    pub tool: String,
    /// The tool's arguments (JSON).
    pub args: serde_json::Value,
    /// Why the owner is asked besides the policy, shown with the question (a call a resumed
    /// run may repeat: it may have happened before the run was interrupted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The owner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run the tool.
    Approved,
    /// Do not; with the reason the graph will see.
    Denied(String),
}

/// A boxed future, as returned by the host's object-safe async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a question to the owner did not end in an approval.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotApproved {
    /// The owner denied it, for this reason.
    #[error("{0}")]
    Denied(String),
    /// No answer within the approval timeout (seconds).
    #[error("no answer within {0} s; a timeout counts as a denial")]
    TimedOut(u64),
    /// The run stopped while it waited.
    #[error("the run was cancelled while waiting for an approval")]
    Cancelled,
}

/// Whoever answers `ask` policies.
pub trait Approver: Send + Sync {
    /// Asks the owner about one tool call. May wait; the caller applies the timeout.
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Decision>;

    /// How the person in charge permits `tool` when the policy denies it: the `runner` flags
    /// by default; the desktop relay names its owner's command instead.
    fn permit_hint(&self, tool: &str) -> String {
        format!("pass --allow {tool} (or --ask {tool}) to permit it")
    }
}

/// Denies every `ask`: used where nobody can answer (no terminal, CI, tests).
#[derive(Debug, Default)]
pub struct NobodyToAsk;

impl Approver for NobodyToAsk {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Decision> {
        let reason = format!(
            "tool {} needs the owner's approval but there is no one to ask (no terminal); pass --allow {} to allow it",
            request.tool, request.tool
        );
        Box::pin(async move { Decision::Denied(reason) })
    }
}

/// Asks on the terminal (prompt on stderr, answer on stdin), one question at a time.
///
/// Lines come from one reader thread started at the first question. A read no one waits for any
/// more (its run ended, or its question timed out) therefore neither keeps the process from
/// exiting nor swallows the answer to the next question: lines typed while no question was
/// open are dropped when the next one is asked.
#[derive(Debug, Default)]
pub struct TerminalApprover {
    lines: tokio::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
}

impl TerminalApprover {
    /// A terminal approver if stdin is a terminal, otherwise one that denies every `ask`.
    pub fn for_stdin() -> Arc<dyn Approver> {
        if std::io::stdin().is_terminal() {
            Arc::new(TerminalApprover::default())
        } else {
            Arc::new(NobodyToAsk)
        }
    }
}

/// Sends stdin's lines until it ends. A plain thread, not a blocking task, so that a pending
/// read does not hold up the runtime's shutdown. If the thread cannot start, the sender is
/// dropped with it and every question is denied.
fn read_stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (lines, receiver) = tokio::sync::mpsc::unbounded_channel();
    let started = std::thread::Builder::new()
        .name("approval-stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            loop {
                let mut line = String::new();
                match stdin.lock().read_line(&mut line) {
                    // Not UTF-8: answers no to the question, the next line may answer the next.
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                        if lines.send(String::new()).is_err() {
                            break;
                        }
                    }
                    Ok(0) | Err(_) => break,
                    Ok(_) if lines.send(line).is_err() => break,
                    Ok(_) => {}
                }
            }
        });
    if let Err(e) = started {
        tracing::warn!("cannot read approvals from the terminal: {e}");
    }
    receiver
}

impl Approver for TerminalApprover {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            let mut lines = self.lines.lock().await;
            let lines = lines.get_or_insert_with(read_stdin_lines);
            // Typed before this question was shown: not an answer to it.
            while lines.try_recv().is_ok() {}
            let note = request
                .note
                .as_deref()
                .map_or_else(String::new, |note| format!("\n{note}"));
            let question = format!(
                "{note}\napprove tool {} with {}? [y/N] ",
                request.tool,
                summarize(&request.args)
            );
            let mut stderr = std::io::stderr();
            let _ = stderr.write_all(question.as_bytes());
            let _ = stderr.flush();
            match lines.recv().await {
                Some(line) if matches!(line.trim(), "y" | "Y" | "yes") => Decision::Approved,
                _ => Decision::Denied(format!("the owner denied tool {}", request.tool)),
            }
        })
    }
}

/// Arguments shown in a prompt, cut so a huge `text` does not flood the terminal.
fn summarize(args: &serde_json::Value) -> String {
    const MAX_CHARS: usize = 300;
    let text = args.to_string();
    match text.char_indices().nth(MAX_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

/// The approvals of one run: policy, approver and timeout.
pub struct Approvals {
    policy: ApprovalPolicy,
    approver: Arc<dyn Approver>,
    timeout: Duration,
}

/// What [`Approvals::check`] reports for the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// Allowed by policy.
    Allowed,
    /// The owner was asked and approved.
    Approved,
}

impl Approvals {
    /// Approvals with `policy`, asking `approver` and waiting at most `timeout`.
    pub fn new(policy: ApprovalPolicy, approver: Arc<dyn Approver>, timeout: Duration) -> Self {
        Self {
            policy,
            approver,
            timeout,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &ApprovalPolicy {
        &self.policy
    }

    /// Asks the owner `request` whatever the policy says (a call a resumed run may repeat):
    /// `Ok` for an approval within the timeout, else why not.
    pub async fn confirm(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Result<(), NotApproved> {
        let answer = tokio::select! {
            answer = tokio::time::timeout(self.timeout, self.approver.ask(request)) => answer,
            () = cancel.cancelled() => return Err(NotApproved::Cancelled),
        };
        match answer {
            Ok(Decision::Approved) => Ok(()),
            Ok(Decision::Denied(reason)) => Err(NotApproved::Denied(reason)),
            Err(_) => Err(NotApproved::TimedOut(self.timeout.as_secs())),
        }
    }

    /// Decides one tool call. `on_ask` runs before the owner is asked (for the trace).
    pub async fn check(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
        on_ask: impl FnOnce(),
    ) -> Result<Checked, Failure> {
        match self.policy.get(&request.tool) {
            Policy::Allow => Ok(Checked::Allowed),
            Policy::Deny => Err(Failure::denied(format!(
                "tool {} is not allowed by the approval policy; {}",
                request.tool,
                self.approver.permit_hint(&request.tool)
            ))),
            Policy::Ask => {
                on_ask();
                let answer = tokio::select! {
                    answer = tokio::time::timeout(self.timeout, self.approver.ask(request)) => answer,
                    () = cancel.cancelled() => return Err(Failure::cancelled("the run was cancelled while waiting for an approval")),
                };
                match answer {
                    Ok(Decision::Approved) => Ok(Checked::Approved),
                    Ok(Decision::Denied(reason)) => Err(Failure::denied(reason)),
                    Err(_) => Err(Failure::denied(format!(
                        "no answer to the approval request for tool {} within {} s; a timeout counts as a denial",
                        request.tool,
                        self.timeout.as_secs()
                    ))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph_js::FailureCode;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Scripted {
        answer: Option<Decision>,
        asked: AtomicUsize,
    }

    impl Approver for Scripted {
        fn ask<'a>(&'a self, _: &'a ApprovalRequest) -> BoxFuture<'a, Decision> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match &self.answer {
                    Some(answer) => answer.clone(),
                    None => std::future::pending().await,
                }
            })
        }
    }

    fn request(tool: &str) -> ApprovalRequest {
        ApprovalRequest {
            run_id: "r".into(),
            tool: tool.into(),
            args: serde_json::json!({}),
            note: None,
        }
    }

    fn setup(answer: Option<Decision>) -> (Approvals, Arc<Scripted>) {
        let approver = Arc::new(Scripted {
            answer,
            asked: AtomicUsize::new(0),
        });
        let mut policy = ApprovalPolicy::default();
        policy
            .set("fs.read", Policy::Allow)
            .set("fs.write", Policy::Ask)
            .set("fs.list", Policy::Deny);
        (
            Approvals::new(policy, approver.clone(), Duration::from_millis(50)),
            approver,
        )
    }

    #[tokio::test]
    async fn allow_runs_deny_and_unknown_are_refused_without_asking() {
        let (approvals, approver) = setup(Some(Decision::Approved));
        let cancel = CancellationToken::new();
        assert_eq!(
            approvals.check(&request("fs.read"), &cancel, || {}).await,
            Ok(Checked::Allowed)
        );
        let denied = approvals
            .check(&request("fs.list"), &cancel, || {})
            .await
            .unwrap_err();
        assert_eq!(denied.code, FailureCode::Denied);
        assert!(
            denied.message.contains("--allow fs.list"),
            "{}",
            denied.message
        );
        let unknown = approvals
            .check(&request("shell.exec"), &cancel, || {})
            .await
            .unwrap_err();
        assert_eq!(unknown.code, FailureCode::Denied);
        assert_eq!(approver.asked.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn ask_follows_the_owner() {
        let (approvals, approver) = setup(Some(Decision::Approved));
        let mut asked = false;
        let ok = approvals
            .check(&request("fs.write"), &CancellationToken::new(), || {
                asked = true
            })
            .await;
        assert_eq!(ok, Ok(Checked::Approved));
        assert!(asked);
        assert_eq!(approver.asked.load(Ordering::SeqCst), 1);

        let (approvals, _) = setup(Some(Decision::Denied("no thanks".into())));
        let denied = approvals
            .check(&request("fs.write"), &CancellationToken::new(), || {})
            .await;
        assert_eq!(denied, Err(Failure::denied("no thanks")));
    }

    #[tokio::test]
    async fn no_answer_within_the_timeout_is_a_denial() {
        let (approvals, _) = setup(None);
        let denied = approvals
            .check(&request("fs.write"), &CancellationToken::new(), || {})
            .await
            .unwrap_err();
        assert_eq!(denied.code, FailureCode::Denied);
        assert!(denied.message.contains("timeout"), "{}", denied.message);
    }

    #[tokio::test]
    async fn cancelling_the_run_ends_the_wait() {
        let (approvals, _) = setup(None);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = approvals
            .check(&request("fs.write"), &cancel, || {})
            .await
            .unwrap_err();
        assert_eq!(err.code, FailureCode::Cancelled);
    }

    #[tokio::test]
    async fn nobody_to_ask_says_how_to_allow() {
        let decision = NobodyToAsk.ask(&request("fs.write")).await;
        assert!(
            matches!(decision, Decision::Denied(ref r) if r.contains("--allow fs.write")),
            "{decision:?}"
        );
    }

    #[test]
    fn policies_parse_and_later_settings_win() {
        assert_eq!("ask".parse::<Policy>(), Ok(Policy::Ask));
        assert!("maybe".parse::<Policy>().is_err());
        let mut policy = ApprovalPolicy::default();
        policy.set("t", Policy::Allow).set("t", Policy::Deny);
        assert_eq!(policy.get("t"), Policy::Deny);
    }
}
