//! LoadModel's `Options` ("key:value" strings from the model YAML) and environment fallbacks,
//! parsed into a `LoadConfig`. Values are inferred as LocalAI does: bool, int, float, string.
//! The table names every option; the other modules parse, set, check and fall back by it.

pub mod bounds;
mod config;
pub mod docs;
mod env;
mod p2p;
mod parse;
mod request;
mod rows;
mod set;
pub mod table;
mod validate;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

pub use config::{
    ClusterOptions, Limits, LoadConfig, MetricsOptions, Parallelism, SamplingOverrides, Shipping,
    Speculation,
};
#[cfg(test)]
pub(crate) use env::NoEnv;
pub use env::{numerics, Env, ProcessEnv, Settings, Token};
pub use p2p::P2pConfig;
pub use parse::{parse_options, OptionValue};
pub use request::LoadRequest;
pub use table::{option_names, OptionSpec, OPTIONS};

use parse::{int_option, range_text, Bad};
