//! Everything that crosses ranks: the MLX group, hostfiles, pipeline send/recv and control.

mod group;
mod hostfile;

pub use group::{Backend, Group, GroupError};
pub use hostfile::{Hostfile, HostfileError, MLX_LAUNCH_STARTING_PORT};

#[cfg(test)]
mod tests;
