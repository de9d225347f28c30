//! The documents stay true to the tree: ARCHITECTURE.md's source tree names every source file
//! of the crates on a line of its own, and every path it names exists; ARCHITECTURE.md's lines
//! fit 100 characters; the README stays short; no document narrates numbered work sessions.
//! The backend's modules import in one direction: no circle among them (the model families
//! aside). And no function outside tests is longer than `MAX_FN_LINES`: Rust functions of the
//! crates, and C++ functions of quant-cpu/cpp unless a `// long: <reason>` comment above them
//! says why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use integration_tests::TestResult;

/// The folders whose every source file the source tree names.
const CRATES: &[&str] = &[
    "backend/src",
    "quant-cpu/src",
    "quant-cpu/cpp",
    "quant-kernels/src",
    "skinny-gemm/src",
    "worker-cli/src",
    "bench/src",
    "integration-tests/src",
    "integration-tests/tests",
    "integration-tests/benches",
    "quant-cpu/tests",
    "quant-cpu/benches",
];

/// What counts as a source file there.
const SOURCE_EXTENSIONS: &[&str] = &["rs", "cpp", "h", "html"];

/// The crates whose Rust functions the length check reads (tests are left out).
const LIBRARY_CRATES: &[&str] = &[
    "backend/src",
    "quant-cpu/src",
    "quant-kernels/src",
    "skinny-gemm/src",
    "worker-cli/src",
    "bench/src",
];

/// The C++ whose functions the length check reads.
const CPP_DIR: &str = "quant-cpu/cpp";

/// The longest the README may be, in lines.
const README_MAX_LINES: usize = 420;

/// The widest a line of ARCHITECTURE.md may be, in characters.
const ARCHITECTURE_MAX_WIDTH: usize = 100;

/// The heading of ARCHITECTURE.md's source tree (the fenced block under it).
const TREE_HEADING: &str = "## Source tree";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fenced block under `TREE_HEADING`.
fn tree_block() -> TestResult<String> {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md"))?;
    let start = text
        .find(TREE_HEADING)
        .ok_or("ARCHITECTURE.md has no source tree section")?;
    let block = text[start..]
        .split("```")
        .nth(1)
        .ok_or("no fenced source tree")?;
    Ok(block.to_string())
}

/// The paths a tree names: each line is a file or folder name (a folder ends in `/`), indented
/// two spaces a level under its folder, then its description after ` — `.
fn tree_paths(block: &str) -> TestResult<Vec<String>> {
    let mut folders: Vec<String> = Vec::new();
    let mut paths = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let indent = line.len() - line.trim_start().len();
        if indent % 2 != 0 || indent / 2 > folders.len() {
            return Err(format!("source tree: misplaced line {line:?}").into());
        }
        folders.truncate(indent / 2);
        let name = line
            .split_whitespace()
            .next()
            .ok_or("source tree: an empty name")?;
        let path = format!("{}{name}", folders.concat());
        if name.ends_with('/') {
            folders.push(name.to_string());
        }
        paths.push(path.trim_end_matches('/').to_string());
    }
    Ok(paths)
}

fn files_with(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) -> TestResult {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files_with(&path, extensions, out)?;
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e))
        {
            out.push(path);
        }
    }
    Ok(())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> TestResult {
    files_with(dir, &["rs"], out)
}

#[test]
fn the_source_tree_names_every_source_file_and_only_paths_that_exist() -> TestResult {
    let named = tree_paths(&tree_block()?)?;
    let stale: Vec<&String> = named.iter().filter(|p| !repo().join(p).exists()).collect();
    assert!(
        stale.is_empty(),
        "named in the source tree but not in the repository: {stale:?}"
    );
    let named: BTreeSet<&String> = named.iter().collect();
    let mut missing = Vec::new();
    for dir in CRATES {
        let mut files = Vec::new();
        files_with(&repo().join(dir), SOURCE_EXTENSIONS, &mut files)?;
        for file in files {
            let rel = file.strip_prefix(repo())?.to_string_lossy().into_owned();
            if !named.contains(&rel) {
                missing.push(rel);
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "not in ARCHITECTURE.md's source tree: {missing:?}"
    );
    Ok(())
}

#[test]
fn the_tree_reader_follows_indentation() -> TestResult {
    let block = "Cargo.toml — workspace\nbackend/ — the library\n  src/ — code\n    lib.rs — root\n  build.rs — codegen\nscripts/ — tools\n";
    assert_eq!(
        tree_paths(block)?,
        [
            "Cargo.toml",
            "backend",
            "backend/src",
            "backend/src/lib.rs",
            "backend/build.rs",
            "scripts"
        ]
    );
    assert!(tree_paths("a/\n     b.rs\n").is_err());
    Ok(())
}

#[test]
fn the_readme_is_short_and_architecture_lines_fit() -> TestResult {
    let readme = std::fs::read_to_string(repo().join("README.md"))?;
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines (at most {README_MAX_LINES})"
    );
    let architecture = std::fs::read_to_string(repo().join("ARCHITECTURE.md"))?;
    let wide: Vec<usize> = architecture
        .lines()
        .enumerate()
        .filter(|(_, l)| l.chars().count() > ARCHITECTURE_MAX_WIDTH)
        .map(|(i, _)| i + 1)
        .collect();
    assert!(
        wide.is_empty(),
        "ARCHITECTURE.md lines over {ARCHITECTURE_MAX_WIDTH} characters: {wide:?}"
    );
    Ok(())
}

/// Whether a text narrates work sessions: "session" followed by a number, or "this session".
fn narrates_sessions(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    for (at, _) in lower.match_indices("session") {
        let after = lower[at + "session".len()..].trim_start_matches(['s', ' ']);
        let before = lower[..at].trim_end();
        if after.starts_with(|c: char| c.is_ascii_digit()) || before.ends_with("this") {
            let line = lower[..at].matches('\n').count() + 1;
            return Some(format!("line {line}"));
        }
    }
    None
}

#[test]
fn no_document_narrates_work_sessions() -> TestResult {
    let mut docs = vec![
        repo().join("README.md"),
        repo().join("ARCHITECTURE.md"),
        repo().join("CONTRIBUTING.md"),
    ];
    files_with(&repo().join("docs"), &["md"], &mut docs)?;
    let mut found = Vec::new();
    for doc in &docs {
        if let Some(at) = narrates_sessions(&std::fs::read_to_string(doc)?) {
            found.push(format!("{}: {at}", doc.display()));
        }
    }
    assert!(
        found.is_empty(),
        "documents that narrate sessions: {found:?}"
    );
    assert!(narrates_sessions("as measured in Session 17,").is_some());
    assert!(narrates_sessions("sessions 20 and 21").is_some());
    assert!(narrates_sessions("in this session").is_some());
    assert!(narrates_sessions("an sshd session per namespace").is_none());
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
    for dir in LIBRARY_CRATES {
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

/// A C++ line's code: without comments, string and character literals; `in_comment` carries a
/// `/* */` comment from one line to the next.
fn cpp_code_of(line: &str, in_comment: &mut bool) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if *in_comment {
            if c == '*' && chars.peek() == Some(&'/') {
                chars.next();
                *in_comment = false;
            }
            continue;
        }
        match c {
            '/' if chars.peek() == Some(&'/') => break,
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                *in_comment = true;
            }
            '"' | '\'' => {
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            chars.next();
                        }
                        d if d == c => break,
                        _ => {}
                    }
                }
                out.push(' ');
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether the text before a `{` at namespace or class level opens a function body: a
/// parameter list, and no type or namespace keyword or initializer before it.
fn opens_function(header: &str) -> bool {
    let Some(paren) = header.find('(') else {
        return false;
    };
    let first = header.split_whitespace().next().unwrap_or_default();
    let scope = ["namespace", "class", "struct", "enum", "union"].contains(&first);
    !scope && !header[..paren].contains('=')
}

/// Every C++ function of `text` as (first line, lines, the comment lines just above it):
/// bodies are matched by braces at namespace or class level, preprocessor lines skipped.
fn cpp_functions(text: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut in_comment, mut continued) = (false, false);
    let mut depth_in_fn = 0usize;
    let (mut header, mut header_start, mut start) = (String::new(), None, 0usize);
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if directive {
            continue;
        }
        for c in cpp_code_of(line, &mut in_comment).chars() {
            if depth_in_fn > 0 {
                match c {
                    '{' => depth_in_fn += 1,
                    '}' => depth_in_fn -= 1,
                    _ => {}
                }
                if depth_in_fn == 0 {
                    found.push((start + 1, i + 1 - start, comments_above(&lines, start)));
                }
                continue;
            }
            match c {
                '{' if opens_function(&header) => {
                    (depth_in_fn, start) = (1, header_start.unwrap_or(i));
                    (header, header_start) = (String::new(), None);
                }
                '{' | '}' | ';' => (header, header_start) = (String::new(), None),
                c => {
                    if !c.is_whitespace() && header_start.is_none() {
                        header_start = Some(i);
                    }
                    header.push(c);
                    if ["public:", "private:", "protected:"].contains(&header.trim()) {
                        (header, header_start) = (String::new(), None);
                    }
                }
            }
        }
        header.push(' ');
    }
    found
}

/// The `//` comment lines directly above line `at`, joined.
fn comments_above(lines: &[&str], at: usize) -> String {
    lines[..at]
        .iter()
        .rev()
        .take_while(|l| l.trim_start().starts_with("//"))
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The C++ functions of `text` longer than `MAX_FN_LINES` with no `// long:` reason above.
fn long_cpp_functions(text: &str) -> Vec<(usize, usize)> {
    cpp_functions(text)
        .into_iter()
        .filter(|(_, n, above)| *n > MAX_FN_LINES && !above.contains("// long:"))
        .map(|(at, n, _)| (at, n))
        .collect()
}

#[test]
fn no_cpp_function_is_longer_than_60_lines_without_a_reason() -> TestResult {
    let mut files = Vec::new();
    files_with(&repo().join(CPP_DIR), &["cpp", "h"], &mut files)?;
    assert!(!files.is_empty(), "no C++ in {CPP_DIR}");
    let mut long = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        for (line, n) in long_cpp_functions(&text) {
            long.push(format!("{}:{line} ({n} lines)", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "C++ functions over {MAX_FN_LINES} lines without a `// long: <reason>` above: {long:#?}"
    );
    Ok(())
}

#[test]
fn the_cpp_length_check_matches_bodies() {
    let body: String = (0..70).map(|i| format!("  int x{i} = '{{';\n")).collect();
    let text = format!(
        "#include <x>\n#define M(a) \\\n  {{ a; }}\nnamespace n {{\nstruct S {{\n public:\n  int f() const {{ return 1; }}\n}};\n\
         /* a {{ comment */\ntemplate <typename T>\nvoid g(T t,\n       int u) {{\n{body}  if (u) {{\n  }}\n}}\n\
         // long: one straight sequence\nint h() {{\n{body}}}\nextern \"C\" int k() {{ return 0; }}\n}}\n"
    );
    let found = cpp_functions(&text);
    let starts: Vec<(usize, usize)> = found.iter().map(|(at, n, _)| (*at, *n)).collect();
    assert_eq!(starts, [(7, 1), (10, 76), (87, 72), (159, 1)]);
    assert_eq!(long_cpp_functions(&text), [(10, 76)]);
}
