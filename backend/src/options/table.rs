//! The option table: each option's name and aliases, values and range, default, when it is
//! read, environment fallbacks and doc (the rows are in `rows.rs`). Parsing looks keys up
//! here, so a key is known exactly when it has a row; docs/options.md's table is rendered
//! from it (a test keeps the two equal) and the fuzz tests take their keys from it.

use super::{int_option, Bad, OptionValue};

pub use super::rows::OPTIONS;

/// The part of `LoadConfig` an option sets, and so the setter that takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Sampling,
    /// How the model is found and read: paths, weights, remote code.
    Model,
    /// Contexts, batches, queues, KV memory and the prefix cache.
    Limits,
    Kv,
    Speculation,
    Adapters,
    /// Where the ranks are and how the model is spread over them.
    Cluster,
    Shipping,
    Metrics,
    P2p,
}

/// When an option's value is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Once, by LoadModel.
    Load,
    /// Kept at load and applied to each request, as a default or an override.
    PerRequest,
}

/// The values an option takes. Integers and numbers carry their range, so the error, the
/// docs and the check all read the same numbers (from `options::bounds`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Bool,
    /// A whole number in `range`, of `unit` ("" for a plain count).
    Int {
        range: (usize, usize),
        unit: &'static str,
    },
    /// A number in `[lo, hi]` (`(lo, hi]` when `above_lo`); `want` is what an error says.
    Number {
        lo: f64,
        hi: f64,
        above_lo: bool,
        want: &'static str,
    },
    /// Any other value, as the docs describe it; the setter checks it.
    Other(&'static str),
}

/// One LoadModel option.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    pub name: &'static str,
    /// Other keys for the same option (`temp` for `temperature`).
    pub aliases: &'static [&'static str],
    pub group: Group,
    pub kind: Kind,
    /// The default as the docs say it (the value itself is in `LoadConfig::defaults`).
    pub default: &'static str,
    pub read: Read,
    /// Variables read, in order, when the option is not given.
    pub env: &'static [&'static str],
    /// The `ModelOptions` field that sets it too ("" for none).
    pub field: &'static str,
    /// The model YAML's top-level key that sets it too ("" for none).
    pub yaml: &'static str,
    pub doc: &'static str,
}

impl OptionSpec {
    /// The value as an integer in the option's range, or the error naming range and value.
    pub(super) fn int(&self, value: &OptionValue, bad: &Bad) -> Result<usize, String> {
        match self.kind {
            Kind::Int { range, unit } => int_option(value, range, unit, bad),
            _ => Err(format!("option `{}` is not an integer option", self.name)),
        }
    }

    /// The value as a number in the option's range, or the error saying what it wants.
    pub(super) fn number(&self, value: &OptionValue, bad: &Bad) -> Result<f32, String> {
        let Kind::Number {
            lo,
            hi,
            above_lo,
            want,
        } = self.kind
        else {
            return Err(format!("option `{}` is not a number option", self.name));
        };
        value
            .as_f64()
            .filter(|x| x.is_finite() && *x >= lo && *x <= hi)
            .map(|x| x as f32)
            .filter(|x| !above_lo || f64::from(*x) > lo)
            .ok_or_else(|| bad(want))
    }
}

/// The option `key` names, by its name or an alias.
pub fn find(key: &str) -> Option<&'static OptionSpec> {
    OPTIONS
        .iter()
        .find(|o| o.name == key || o.aliases.contains(&key))
}

/// Every key an option is known by: names, then aliases.
pub fn option_names() -> Vec<&'static str> {
    let aliases = OPTIONS.iter().flat_map(|o| o.aliases.iter().copied());
    OPTIONS.iter().map(|o| o.name).chain(aliases).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names and aliases are unique, so a key finds one option.
    #[test]
    fn option_names_are_unique() {
        let names = option_names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }
}
