//! ARCHITECTURE.md's layout stays true to the tree: every source file of the library crates is
//! named in it, and every file it names exists. The backend's modules import in one
//! direction: no circle among them (the model families aside). And no function outside tests
//! is longer than `MAX_FN_LINES`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use integration_tests::TestResult;

/// The crates whose every source file the layout names (integration tests are listed by subject).
const CRATES: &[&str] = &[
    "backend/src",
    "quant-cpu/src",
    "quant-kernels/src",
    "skinny-gemm/src",
    "worker-cli/src",
];

/// Files every crate has, which the layout names by their folder instead.
const IMPLIED: &[&str] = &["mod.rs", "lib.rs", "tests.rs"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fenced block under "## Layout (as built)".
fn layout() -> TestResult<String> {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md"))?;
    let start = text
        .find("## Layout (as built)")
        .ok_or("ARCHITECTURE.md has no layout section")?;
    let block = text[start..]
        .split("```")
        .nth(1)
        .ok_or("no fenced layout")?;
    Ok(block.to_string())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> TestResult {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The `name.rs` words of a text.
fn named_files(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter(|w| w.ends_with(".rs") && w.len() > 3)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_layout_names_every_source_file_and_only_files_that_exist() -> TestResult {
    let layout = layout()?;
    let named = named_files(&layout);
    let mut files = Vec::new();
    for krate in CRATES {
        rust_files(&repo().join(krate), &mut files)?;
    }
    let mut missing: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_name()?.to_str().map(str::to_string))
        .filter(|name| !IMPLIED.contains(&name.as_str()) && !named.contains(name))
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "not in ARCHITECTURE.md's layout: {missing:?}"
    );

    let mut everywhere = Vec::new();
    for dir in [
        "backend",
        "quant-cpu",
        "quant-kernels",
        "skinny-gemm",
        "worker-cli",
        "build-support",
        "integration-tests",
    ] {
        rust_files(&repo().join(dir), &mut everywhere)?;
    }
    let existing: BTreeSet<String> = everywhere
        .iter()
        .filter_map(|f| f.file_name()?.to_str().map(str::to_string))
        .collect();
    let stale: Vec<&String> = named.iter().filter(|n| !existing.contains(*n)).collect();
    assert!(
        stale.is_empty(),
        "named in the layout but not in the tree: {stale:?}"
    );
    Ok(())
}

/// For each top-level module of backend/src (the families in `models` aside), the others
/// its code names as `crate::name`; test modules and test files are left out.
fn module_uses() -> TestResult<BTreeMap<String, BTreeSet<String>>> {
    let src = repo().join("backend/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files)?;
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src)?;
        let top = rel
            .iter()
            .next()
            .and_then(|c| c.to_str())
            .unwrap_or_default();
        let module = top.trim_end_matches(".rs").to_string();
        let skip = ["models", "lib", "main"].contains(&module.as_str());
        if skip || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file)?;
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let used = uses.entry(module.clone()).or_default();
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                used.insert(name);
            }
        }
    }
    Ok(uses)
}

/// A circle through `from`, as the path that closes it, if there is one.
fn circle(
    uses: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    let from = path.last()?.clone();
    for next in uses.get(&from).into_iter().flatten() {
        if let Some(at) = path.iter().position(|m| m == next) {
            let mut found = path[at..].to_vec();
            found.push(next.clone());
            return Some(found);
        }
        if done.contains(next) {
            continue;
        }
        path.push(next.clone());
        if let Some(found) = circle(uses, path, done) {
            return Some(found);
        }
        path.pop();
    }
    done.insert(from);
    None
}

#[test]
fn backend_modules_import_without_a_circle() -> TestResult {
    let uses = module_uses()?;
    assert!(uses.contains_key("engine") && uses.contains_key("distributed"));
    let mut done = BTreeSet::new();
    for module in uses.keys() {
        let mut path = vec![module.clone()];
        if let Some(found) = circle(&uses, &mut path, &mut done) {
            panic!("backend/src imports in a circle: {}", found.join(" -> "));
        }
    }
    Ok(())
}

/// The longest a function of the library crates may be, signature to closing brace.
const MAX_FN_LINES: usize = 60;

/// A line without its `//` comment, string literals and brace or semicolon char literals,
/// so that only code's own braces, brackets and semicolons count.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match (in_string, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => in_string = false,
            (true, _) => {}
            (false, '"') => in_string = true,
            (false, '/') if chars.peek() == Some(&'/') => break,
            (false, '\'') if matches!(chars.peek(), Some('{' | '}' | ';')) => {
                chars.next();
            }
            (false, c) => out.push(c),
        }
    }
    out
}

/// Whether a line starts a function: `fn name`, after any visibility and qualifiers.
fn starts_fn(code: &str) -> bool {
    let words: Vec<&str> = code.split_whitespace().collect();
    words.iter().position(|w| *w == "fn").is_some_and(|at| {
        words[..at].iter().all(|w| {
            w.starts_with("pub") || ["const", "unsafe", "async", "extern", "\"C\""].contains(w)
        }) && words
            .get(at + 1)
            .is_some_and(|n| n.starts_with(|c: char| c.is_alphabetic() || c == '_'))
    })
}

/// The lines of the function that starts at `lines[0]`; None for a declaration (`;` before
/// any body, as in an `extern` block or a trait).
fn fn_length(lines: &[String]) -> Option<usize> {
    let (mut nest, mut depth) = (0i32, 0i32);
    for (i, line) in lines.iter().enumerate() {
        for c in line.chars() {
            match c {
                '(' | '[' | '<' if depth == 0 => nest += 1,
                ')' | ']' | '>' if depth == 0 => nest -= 1,
                ';' if depth == 0 && nest <= 0 => return None,
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// Every function of `text` (its test module left out) longer than `MAX_FN_LINES`.
fn long_functions(text: &str) -> Vec<(usize, usize)> {
    let code: Vec<String> = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default()
        .lines()
        .map(code_of)
        .collect();
    (0..code.len())
        .filter(|&i| starts_fn(&code[i]))
        .filter_map(|i| fn_length(&code[i..]).map(|n| (i + 1, n)))
        .filter(|&(_, n)| n > MAX_FN_LINES)
        .collect()
}

#[test]
fn no_function_outside_tests_is_longer_than_60_lines() -> TestResult {
    let mut files = Vec::new();
    for dir in CRATES {
        rust_files(&repo().join(dir), &mut files)?;
    }
    let mut long = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("tests.rs")) {
        let text = std::fs::read_to_string(file)?;
        for (line, n) in long_functions(&text) {
            long.push(format!("{}:{line} ({n} lines)", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines: {long:#?}"
    );
    Ok(())
}

#[test]
fn the_length_check_sees_bodies_not_declarations() {
    let body: String = (0..70)
        .map(|i| format!("    let _x{i} = \"{{\";\n"))
        .collect();
    let text = format!("extern \"C\" {{\n    fn f(\n        x: [u8; 4],\n    ) -> i32;\n}}\n\npub(crate) fn g() {{\n{body}}}\n");
    assert_eq!(long_functions(&text), [(7, 72)]);
}
