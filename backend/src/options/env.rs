//! The environment the options fall back to: the process's, the CLI's settings over it, or
//! none (tests); and the control channel's token read from it. An option's variables are
//! read through its table row, so docs/options.md lists exactly what is read.

use super::range_text;
use super::table::{self, Kind};

/// The process environment the fallbacks come from (injectable for tests).
pub trait Env {
    fn var(&self, key: &str) -> Option<String>;
}

pub struct ProcessEnv;

/// An empty environment, for tests that must not see the process's.
#[cfg(test)]
pub(crate) struct NoEnv;

#[cfg(test)]
impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

/// The settings rank 0 was started with: the command line's values, by the variable each
/// stands for, over the process environment. The CLI hands them over in this struct, never
/// with `set_var` while other threads run. No `Debug`: it may hold the token.
#[derive(Clone, Default)]
pub struct Settings {
    given: std::collections::BTreeMap<&'static str, String>,
}

impl Settings {
    /// `value` stands for the variable `key`, over the process environment.
    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Settings {
        self.given.insert(key, value.into());
        self
    }

    /// `value` stands for every variable of `option`'s table row, so the CLI's
    /// flags reach LoadModel by the row, not by variable names of their own. An option with
    /// no variables is left alone (a test keeps the CLI's names in the table).
    pub fn option(mut self, option: &str, value: impl Into<String>) -> Settings {
        let value = value.into();
        for key in table::find(option).map_or(&[][..], |spec| spec.env) {
            self.given.insert(key, value.clone());
        }
        self
    }
}

impl Env for Settings {
    fn var(&self, key: &str) -> Option<String> {
        match self.given.get(key) {
            Some(v) => Some(v.clone()).filter(|v| !v.is_empty()),
            None => ProcessEnv.var(key),
        }
    }
}

/// The control channel's shared secret (`MLX_DISTRIBUTED_TOKEN`); never printed.
#[derive(Clone, PartialEq)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }
}

/// The value of the first variable `option`'s row lists that `env` sets, with its name.
pub(super) fn fallback(env: &dyn Env, option: &str) -> Option<(&'static str, String)> {
    let spec = table::find(option)?;
    spec.env
        .iter()
        .find_map(|&key| env.var(key).map(|v| (key, v)))
}

/// The packed numerics when a load names none: `cpu_numerics`'s variable
/// (`MLX_DISTRIBUTED_CPU_NUMERICS`) if set, `exact` or `int8` (an error names the variable and
/// any other value), else int8. The flag says whether the variable chose them.
pub fn numerics(env: &dyn Env) -> Result<(crate::weights::Numerics, bool), String> {
    let Some((key, v)) = fallback(env, "cpu_numerics") else {
        return Ok((crate::weights::Numerics::Int8, false));
    };
    match crate::weights::Numerics::parse(&v) {
        Some(n) => Ok((n, true)),
        None => Err(format!(
            "{key}: expected exact or int8, got {}",
            crate::error::quote(&v)
        )),
    }
}

/// `option`'s variable as a whole number in the row's range, or an error naming the
/// variable, the range and the value.
pub(super) fn fallback_int(env: &dyn Env, option: &str) -> Result<Option<usize>, String> {
    let (Some(spec), Some((key, v))) = (table::find(option), fallback(env, option)) else {
        return Ok(None);
    };
    let Kind::Int { range, unit } = spec.kind else {
        return Err(format!("option `{option}` is not an integer option"));
    };
    match v.trim().parse::<usize>() {
        Ok(n) if (range.0..=range.1).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{key}: expected {}, got {}",
            range_text(range, unit),
            crate::error::quote(&format!("{v:?}"))
        )),
    }
}
