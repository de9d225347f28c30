//! Macros for mlx-rs.

#[macro_use]
mod internal;

mod array;
mod assert;

pub use mlx_macros::*;
