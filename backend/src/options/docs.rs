//! docs/options.md's table, rendered from the option table so the two cannot drift (a test
//! compares them).

use super::table::{Kind, OptionSpec, Read, OPTIONS};

/// docs/options.md's table, rendered from [`OPTIONS`].
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| option | type/range | default | read | environment | doc |\n\
         |---|---|---|---|---|---|\n",
    );
    for o in OPTIONS {
        let read = match o.read {
            Read::Load => "load",
            Read::PerRequest => "per request",
        };
        let env: Vec<String> = o.env.iter().map(|v| format!("`{v}`")).collect();
        let env = if env.is_empty() {
            "-".to_string()
        } else {
            env.join(", ")
        };
        out += &format!(
            "| {} | {} | {} | {read} | {env} | {} |\n",
            option_cell(o),
            kind_text(o.kind),
            o.default,
            o.doc
        );
    }
    out
}

/// A command-line flag's help for `o`: the row's doc, values and default, as plain text.
pub fn flag_help(o: &OptionSpec) -> String {
    let text = format!(
        "{} ({}; default: {}; the option `{}`)",
        o.doc,
        kind_text(o.kind),
        o.default,
        o.name
    );
    let text = text.replace('`', "");
    let mut chars = text.chars();
    chars.next().map_or(text.clone(), |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

/// The name, with its aliases and the `ModelOptions` field and YAML key that also set it.
fn option_cell(o: &OptionSpec) -> String {
    let mut also: Vec<String> = o.aliases.iter().map(|a| format!("`{a}`")).collect();
    if !o.field.is_empty() {
        also.push(format!("`ModelOptions.{}`", o.field));
    }
    if !o.yaml.is_empty() {
        also.push(format!("the YAML's `{}`", o.yaml));
    }
    match also.is_empty() {
        true => format!("`{}`", o.name),
        false => format!("`{}` (also {})", o.name, also.join(", ")),
    }
}

/// What values an option takes, as the docs say it.
pub fn kind_text(kind: Kind) -> String {
    match kind {
        Kind::Bool => "`true`, `false`".to_string(),
        Kind::Int {
            range: (lo, hi),
            unit: "",
        } => format!("integer in [{}, {}]", grouped(lo), grouped(hi)),
        Kind::Int {
            range: (lo, hi),
            unit,
        } => format!("whole {unit} in [{}, {}]", grouped(lo), grouped(hi)),
        Kind::Number {
            lo, hi, above_lo, ..
        } => match above_lo {
            true => format!("number in ({lo}, {hi}]"),
            false => format!("number in [{lo}, {hi}]"),
        },
        Kind::Other(text) => text.to_string(),
    }
}

/// `n` with thousands separators from five digits on (1024, 16,777,216).
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    if digits.len() < 5 {
        return digits;
    }
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(16_777_216), "16,777,216");
        assert_eq!(grouped(1024), "1024");
    }

    /// docs/options.md's table is this table; `UPDATE_OPTIONS_DOC=1` rewrites the file.
    #[test]
    fn docs_options_md_matches_the_table() -> Result<(), String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/options.md");
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let lines: Vec<&str> = text.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.starts_with("| option |"))
            .ok_or("docs/options.md has no `| option |` table")?;
        let end = (start..lines.len())
            .find(|&i| !lines[i].starts_with('|'))
            .unwrap_or(lines.len());
        let found = lines[start..end].join("\n") + "\n";
        let expected = markdown_table();
        if found == expected {
            return Ok(());
        }
        if std::env::var("UPDATE_OPTIONS_DOC").is_ok_and(|v| v == "1") {
            let mut rewritten = lines[..start].join("\n") + "\n" + &expected;
            if end < lines.len() {
                rewritten += &(lines[end..].join("\n") + "\n");
            }
            return std::fs::write(path, rewritten).map_err(|e| format!("{path}: {e}"));
        }
        eprintln!("docs/options.md's table should be:\n{expected}");
        Err(
            "docs/options.md's table differs from backend/src/options/rows.rs (the expected \
             table is printed above); rerun with UPDATE_OPTIONS_DOC=1 to rewrite it"
                .into(),
        )
    }
}
