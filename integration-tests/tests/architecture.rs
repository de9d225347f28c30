//! ARCHITECTURE.md's layout stays true to the tree: every source file of the library crates is
//! named in it, and every file it names exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use integration_tests::TestResult;

/// The crates whose every source file the layout names (integration tests are listed by subject).
const CRATES: &[&str] = &[
    "backend/src",
    "quant-cpu/src",
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
