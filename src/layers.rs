//! The layering rule, checked: each module of the library may use only the modules listed for it
//! here, all of them below it. `docs/architecture.md` draws the same table.

/// Each module and what it may use (`diag!`, the crate root's macro, is allowed everywhere).
const ALLOWED: &[(&str, &[&str])] = &[
    ("exit", &[]),
    ("wire", &["exit"]),
    ("transport", &["exit", "wire"]),
    ("redact", &["exit", "wire"]),
    ("tape", &["exit", "wire", "redact"]),
    ("remote", &["exit"]),
    ("config", &["exit", "redact", "tape"]),
    ("integrity", &["exit", "wire", "redact", "tape"]),
    (
        "inspect",
        &["exit", "wire", "transport", "redact", "tape", "model"],
    ),
    ("stats", &["wire", "tape", "model", "inspect"]),
    ("record", &["exit", "wire", "transport", "redact", "tape"]),
    ("compare", &["exit", "wire", "redact", "tape"]),
    (
        "play",
        &["exit", "wire", "transport", "redact", "tape", "record"],
    ),
    (
        "model",
        &[
            "exit",
            "wire",
            "transport",
            "redact",
            "tape",
            "record",
            "compare",
        ],
    ),
    (
        "check",
        &[
            "exit",
            "wire",
            "transport",
            "redact",
            "tape",
            "record",
            "compare",
        ],
    ),
    ("diff", &["exit", "wire", "tape", "compare", "model"]),
    (
        "export",
        &["exit", "wire", "transport", "redact", "tape", "model"],
    ),
    ("import", &["exit", "wire", "redact", "tape"]),
    (
        "run",
        &[
            "exit",
            "wire",
            "transport",
            "redact",
            "tape",
            "record",
            "play",
            "model",
        ],
    ),
    (
        "report",
        &[
            "exit", "wire", "tape", "compare", "check", "diff", "model", "stats", "inspect",
        ],
    ),
    (
        "demo",
        &["exit", "wire", "tape", "compare", "check", "diff", "report"],
    ),
];

/// The modules that may use anything: `errors` names every error type, `lib.rs` declares all,
/// `fuzz_api` hands the fuzz targets (`fuzz/`) crate-private readers.
const TOP: &[&str] = &["errors", "lib", "layers", "fuzz_api"];

/// The crate modules a file's code (comments left out) names.
fn uses(text: &str) -> std::collections::BTreeSet<String> {
    let re = regex::Regex::new(r"\bcrate::(?:\{\s*)?([a-z_]+)").expect("a valid regex");
    let group = regex::Regex::new(r"\bcrate::\{([^}]*)\}").expect("a valid regex");
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out: std::collections::BTreeSet<String> =
        re.captures_iter(&code).map(|c| c[1].to_string()).collect();
    for g in group.captures_iter(&code) {
        for part in g[1].split(',') {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out.remove("diag");
    out
}

#[test]
fn no_module_uses_one_above_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut seen = Vec::new();
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&src).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        let module = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name")
            .to_string();
        if module == "main" || module == "cli" || TOP.contains(&module.as_str()) {
            continue; // the binary, and the top
        }
        let allowed = ALLOWED
            .iter()
            .find(|(m, _)| *m == module)
            .unwrap_or_else(|| panic!("src/{module}: a module missing from the layer table"))
            .1;
        seen.push(module.clone());
        let files: Vec<std::path::PathBuf> = if path.is_dir() {
            walk(&path)
        } else {
            vec![path.clone()]
        };
        for f in files {
            let text = std::fs::read_to_string(&f).expect("a readable source file");
            for used in uses(&text) {
                if used != module && !allowed.contains(&used.as_str()) {
                    wrong.push(format!("{} uses crate::{used}", f.display()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up a layer:\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        seen.len(),
        ALLOWED.len(),
        "every module in the table exists: {seen:?}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("a readable directory") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_scan_sees_every_way_of_naming_a_module() {
    let found = uses("use crate::tape::X;\nuse crate::{wire::Dir, redact};\n// crate::check in a comment\nlet x = crate::play::f();");
    let found: Vec<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(found, ["play", "redact", "tape", "wire"]);
}
