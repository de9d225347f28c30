//! The "key:value" entries of LoadModel's `Options`: split, typed as LocalAI types them,
//! read as the integers, booleans and transports the setters take, and unknown keys logged
//! with the nearest known name.

use super::table::option_names;
use crate::distributed::Transport;

/// An option's value, typed as LocalAI's `parse_options` types it.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl OptionValue {
    fn parse(raw: &str) -> OptionValue {
        match raw.to_ascii_lowercase().as_str() {
            "true" => return OptionValue::Bool(true),
            "false" => return OptionValue::Bool(false),
            _ => {}
        }
        let digits = raw.replace('_', "");
        if let Ok(i) = digits.parse::<i64>() {
            return OptionValue::Int(i);
        }
        match digits.parse::<f64>() {
            Ok(f) => OptionValue::Float(f),
            Err(_) => OptionValue::Str(raw.to_string()),
        }
    }

    pub(super) fn as_f64(&self) -> Option<f64> {
        match self {
            OptionValue::Int(i) => Some(*i as f64),
            OptionValue::Float(f) => Some(*f),
            _ => None,
        }
    }
}

/// The value as written (a string quoted and cut by `error::quote`), for error messages.
impl std::fmt::Display for OptionValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Int(i) => write!(f, "{i}"),
            OptionValue::Float(x) => write!(f, "{x}"),
            OptionValue::Str(s) => write!(f, "\"{}\"", crate::error::quote(s)),
        }
    }
}

/// An integer in `[lo, hi]`.
fn int_in(v: &OptionValue, (lo, hi): (usize, usize)) -> Option<usize> {
    match v {
        OptionValue::Int(i) => usize::try_from(*i).ok().filter(|n| (lo..=hi).contains(n)),
        _ => None,
    }
}

/// What an integer option expects: "an integer in [lo, hi]" and the unit, if any.
pub(super) fn range_text((lo, hi): (usize, usize), unit: &str) -> String {
    match unit {
        "" => format!("an integer in [{lo}, {hi}]"),
        unit => format!("a whole number of {unit} in [{lo}, {hi}]"),
    }
}

/// Splits each entry at its first ':' and trims both sides; entries without ':' are skipped.
pub fn parse_options(options: &[String]) -> Vec<(String, OptionValue)> {
    options
        .iter()
        .filter_map(|o| o.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), OptionValue::parse(v.trim())))
        .collect()
}

/// Builds an option's error from what it expected.
pub(super) type Bad<'a> = dyn Fn(&str) -> String + 'a;

pub(super) fn transport_of(v: &OptionValue) -> Option<Transport> {
    match v {
        OptionValue::Str(s) if s == "ring" => Some(Transport::Ring),
        OptionValue::Str(s) if s == "jaccl" => Some(Transport::Jaccl),
        _ => None,
    }
}

pub(super) fn bool_of(v: &OptionValue) -> Option<bool> {
    match v {
        OptionValue::Bool(b) => Some(*b),
        OptionValue::Int(0) => Some(false),
        OptionValue::Int(1) => Some(true),
        _ => None,
    }
}

/// An integer option in its range, or the error naming the option, range and value.
pub(super) fn int_option(
    v: &OptionValue,
    range: (usize, usize),
    unit: &str,
    bad: &Bad,
) -> Result<usize, String> {
    int_in(v, range).ok_or_else(|| bad(&range_text(range, unit)))
}

/// Unknown option keys, each logged once: a YAML of millions of entries logs at most
/// `UNKNOWN_LOGGED` lines and a count of the rest.
#[derive(Default)]
pub(super) struct UnknownOptions {
    keys: std::collections::BTreeSet<String>,
    more: usize,
}

/// The most distinct unknown keys a load logs by name.
const UNKNOWN_LOGGED: usize = 32;

impl UnknownOptions {
    pub(super) fn note(&mut self, key: &str) {
        if self.keys.contains(key) {
            return;
        }
        match self.keys.len() < UNKNOWN_LOGGED {
            true => drop(self.keys.insert(key.to_string())),
            false => self.more += 1,
        }
    }

    pub(super) fn log(&self) {
        for key in &self.keys {
            match nearest(key) {
                Some(near) => tracing::warn!(
                    option = %crate::error::quote(key),
                    did_you_mean = near,
                    "unknown option ignored"
                ),
                None => {
                    tracing::warn!(option = %crate::error::quote(key), "unknown option ignored")
                }
            }
        }
        if self.more > 0 {
            tracing::warn!(
                more = self.more,
                "more unknown option entries ignored (not named)"
            );
        }
    }
}

/// The known key closest to an unknown one, when it is a likely typo (an edit distance of at
/// most a third of its length); none for long keys, which are no typo of a short name.
pub(super) fn nearest(key: &str) -> Option<&'static str> {
    if key.is_empty() || key.len() > 64 {
        return None;
    }
    let most = (key.chars().count() / 3).max(1);
    option_names()
        .into_iter()
        .map(|name| (edit_distance(key, name), name))
        .filter(|(d, _)| *d <= most)
        .min()
        .map(|(_, name)| name)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_the_nearest_name() {
        assert_eq!(nearest("temprature"), Some("temperature"));
        assert_eq!(nearest("max_token"), Some("max_tokens"));
        assert_eq!(nearest("gpu_layers"), None);
        assert_eq!(nearest(&"x".repeat(1000)), None);
    }
}
