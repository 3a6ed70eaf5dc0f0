use super::*;

/// `source` erased, or the refusal's text.
fn erased(source: &str) -> String {
    erase_types(source).unwrap_or_else(|e| panic!("{source}: {e}"))
}

/// Every line of the erased text keeps its length, and each character is the source's or a
/// space: blanking never moves code.
fn assert_blanked(source: &str, out: &str) {
    assert_eq!(source.lines().count(), out.lines().count(), "{out}");
    for (a, b) in source.lines().zip(out.lines()) {
        assert_eq!(
            a.encode_utf16().count(),
            b.encode_utf16().count(),
            "{a:?} → {b:?}"
        );
    }
}

#[test]
fn types_are_blanked_to_spaces_in_place() {
    let source = "interface Topic { name: string }\n\
                  type Pair<T> = [T, T];\n\
                  export default async function (args: { topic?: string }, g: G): Promise<unknown> {\n\
                  \x20 const n: number = (args.topic as string).length;\n\
                  \x20 const m = { n } satisfies Record<string, number>;\n\
                  \x20 const f = <T,>(x: T): T => x;\n\
                  \x20 return f<number>(n!) + m.n;\n\
                  }\n";
    let out = erased(source);
    assert_blanked(source, &out);
    assert!(!out.contains("interface") && !out.contains("Pair"), "{out}");
    assert!(
        out.contains("export default async function (args                    , g   )"),
        "{out}"
    );
    assert!(
        out.contains("const n         = (args.topic          ).length;"),
        "{out}"
    );
    assert!(out.contains("const m = { n }"), "{out}");
    assert!(
        !out.contains("satisfies") && !out.contains("number"),
        "{out}"
    );
}

#[test]
fn type_only_imports_exports_and_optional_parameters_are_erased() {
    let source = "import type { Json } from \"./types\";\n\
                  export type Result = { ok: boolean };\n\
                  export interface Args { x?: number }\n\
                  function add(a: number, b?: number): number { return a + (b ?? 0); }\n\
                  declare const later: string;\n\
                  export const meta = { name: \"t\", slug: \"t\", version: \"1.0.0\", description: \"d\" };\n";
    let out = erased(source);
    assert_blanked(source, &out);
    assert!(!out.contains("import") && !out.contains("declare"), "{out}");
    assert!(out.contains("function add(a        , b         )"), "{out}");
    assert!(out.contains("export const meta = {"), "{out}");
}

#[test]
fn strings_templates_regexes_and_comments_keep_type_like_text() {
    let source = "const s: string = \"a: number\";\n\
                  const q = 'x as string, <T>y';\n\
                  const t = `b: ${s as string}: number`;\n\
                  const r = /c: number|interface X {}/g;\n\
                  // d: number\n\
                  /* type T = string; */\n\
                  const u = s.length < 2 ? 1 : 2;\n";
    let out = erased(source);
    assert_blanked(source, &out);
    assert!(out.contains("\"a: number\""), "{out}");
    assert!(out.contains("'x as string, <T>y'"), "{out}");
    assert!(out.contains("`b: ${s          }: number`"), "{out}");
    assert!(out.contains("/c: number|interface X {}/g"), "{out}");
    assert!(out.contains("// d: number"), "{out}");
    assert!(out.contains("/* type T = string; */"), "{out}");
    assert!(out.contains("const u = s.length < 2 ? 1 : 2;"), "{out}");
}

#[test]
fn plain_javascript_is_unchanged() {
    let source = "export const meta = { slug: \"a\" };\n\
                  export default async (args, g) => ({ x: args.x < 1 ? [1] : /a/.test(\"a\") });\n";
    assert_eq!(erased(source), source);
}

/// The refusal for `source`, which must not erase.
fn refused(source: &str) -> TypeScriptError {
    match erase_types(source) {
        Ok(out) => panic!("erased {source:?} to {out:?}"),
        Err(e) => e,
    }
}

#[test]
fn constructs_that_need_code_generation_are_refused_naming_them_and_their_place() {
    let cases = [
        ("const a = 1;\n  enum Color { Red }\n", "`enum`", 2, 3),
        (
            "\nnamespace Util { export const x = 1; }\n",
            "`namespace`",
            2,
            1,
        ),
        (
            "class C {\n  constructor(private x: number) {}\n}\n",
            "parameter property",
            2,
            23,
        ),
        (
            "import fs = require(\"fs\");\n",
            "`import x = require",
            1,
            1,
        ),
        ("const v = <string>x;\n", "`<T>expr`", 1, 11),
        ("@sealed\nclass C {}\n", "decorator", 1, 1),
    ];
    for (source, named, line, column) in cases {
        let e = refused(source);
        assert!(e.message.contains(named), "{source}: {e}");
        assert_eq!((e.line, e.column), (line, column), "{source}: {e}");
        assert!(
            e.to_string()
                .ends_with(&format!(" at line {line}, col {column}")),
            "{e}"
        );
    }
    assert!(refused("enum E { A }").message.contains("code generation"));
    // Types alone, in a namespace or enum-like object, erase.
    let fine =
        erased("declare namespace Types { type A = string }\nconst E = { A: 1 } as const;\n");
    assert!(fine.contains("const E = { A: 1 }"), "{fine}");
}

#[test]
fn a_syntax_error_names_its_place() {
    let e = refused("const a = 1;\nconst b: = 2;\n");
    assert!(e.message.starts_with("TypeScript syntax error"), "{e}");
    assert_eq!(e.line, 2, "{e}");
    assert_eq!(
        e.located(Path::new("g/x.ts")),
        format!("g/x.ts:2:{}: {}", e.column, e.message)
    );
}

#[test]
fn only_ts_files_that_are_not_declarations_are_typescript_graphs() {
    assert!(is_typescript(Path::new("graphs/a.ts")));
    assert!(!is_typescript(Path::new("graphs/graph.d.ts")));
    assert!(!is_typescript(Path::new("graphs/a.js")));
    assert!(!is_typescript(Path::new("graphs/ts")));
}

/// The lines erasing changed travel on a last comment line, as written, so a code frame shows
/// them; a graph with no types gets none, and the line is valid JavaScript whatever it holds.
#[test]
fn the_written_lines_follow_the_erased_text_on_one_comment_line() {
    let source = "const a: number = 1;\nconst b = 2;\nconst c = \"\u{2028}\" as string;";
    let out = with_written_lines(source, erased(source));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let last = lines[3]
        .strip_prefix(graph_js::WRITTEN_LINES_MARKER)
        .expect("the marker line");
    // U+2028 would end the comment in JavaScript: it is escaped.
    assert!(!last.contains('\u{2028}'), "{last}");
    let written: Vec<(u32, String)> = serde_json::from_str(last).expect("JSON");
    assert_eq!(
        written,
        vec![
            (1, "const a: number = 1;".to_owned()),
            (3, "const c = \"\u{2028}\" as string;".to_owned())
        ]
    );
    let plain = "const b = 2;\n";
    assert_eq!(with_written_lines(plain, erased(plain)), plain);
    // Past the script limit the frames go without: the graph still runs.
    let long = format!(
        "const a: number = 1;\n//{}\n",
        "x".repeat(graph_js::MAX_SCRIPT_BYTES - 30)
    );
    let erased_long = erased(&long);
    assert_eq!(with_written_lines(&long, erased_long.clone()), erased_long);
}
