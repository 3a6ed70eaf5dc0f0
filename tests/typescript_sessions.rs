//! Issue 45, point 5: `relay desktop session add graph.ts` takes a TypeScript graph, stored with
//! its types erased on the same lines (so the desktop's runs and errors point at the `.ts`
//! lines), and refuses TypeScript that needs code generation, naming it and its place.

use std::path::Path;
use std::process::{Command, Output};

use crate::harness;

const TYPED: &str = r#"export const meta = { name: "Typed", slug: "typed", version: "1.0.0" } satisfies GraphMeta;
interface Reply { said: string }
export default async function (args: GraphArgs, g: G): Promise<Reply> {
  const said: string = (args.text as string | undefined) ?? "a: number";
  return { said };
}
"#;

fn desktop(state: &Path, args: &[&str]) -> Output {
    Command::new(harness::relay_binary())
        .args(["desktop", "--state"])
        .arg(state)
        .args(args)
        .output()
        .expect("relay desktop runs")
}

#[test]
fn session_add_takes_a_typescript_graph_with_its_types_erased() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("desktop.db");
    let graph = dir.path().join("typed.ts");
    std::fs::write(&graph, TYPED).expect("graph");
    let added = desktop(&state, &["session", "add", graph.to_str().expect("path")]);
    assert!(added.status.success(), "{added:?}");
    let sessions = relay_desktop::state::DesktopState::open(&state)
        .expect("state")
        .sessions()
        .expect("sessions");
    let [session] = sessions.as_slice() else {
        panic!("one session: {sessions:?}");
    };
    assert_eq!(session.slug, "typed");
    // The erased code keeps every line; one comment line after it holds the lines erasing
    // changed, as written, for the code frames of errors.
    let (code, written) = session
        .script
        .split_once(graph_js::WRITTEN_LINES_MARKER)
        .expect("the written lines");
    assert_eq!(code.lines().count(), TYPED.lines().count());
    assert!(!code.contains("interface"), "{code}");
    assert!(written.contains("interface"), "{written}");
    assert!(
        session
            .script
            .contains("const said         = (args.text                      ) ?? \"a: number\";"),
        "{}",
        session.script
    );

    let enumerated = dir.path().join("colors.ts");
    std::fs::write(
        &enumerated,
        TYPED.replace("interface Reply", "enum Color { Red }\ninterface Reply"),
    )
    .expect("graph");
    let refused = desktop(
        &state,
        &["session", "add", enumerated.to_str().expect("path")],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("a TypeScript `enum`"), "{said}");
    assert!(said.contains("at line 2, col 1"), "{said}");
}
