//! Everything that crosses ranks: the MLX group, hostfiles, pipeline send/recv and control.

mod group;

pub use group::{Backend, Group, GroupError};

#[cfg(test)]
mod tests;
