//! The engine: one thread owns the model and every MLX array (an `Array` is not `Sync`);
//! everything else reaches it through `EngineHandle`, a channel-based handle.

mod batch;
mod build;
mod cluster_load;
mod core;
#[cfg(test)]
pub(crate) mod fake;
pub mod follower;
mod guard;
mod handle;
mod load;
mod p2p_load;
mod publish;
mod relay;
mod sharded;
mod shared;
mod wait;

pub use handle::{Engine, EngineHandle, EventStream};
pub use shared::{EngineState, Metrics, ModelInfo, Snapshot};
