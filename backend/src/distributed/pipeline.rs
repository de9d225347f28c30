//! The pipeline's activation hand-off: each rank receives from the rank before it and
//! sends to the rank after it, and the last rank sends back to rank 0 (ring neighbours).

use mlx_rs::{Array, Dtype};

use super::{Group, GroupError};

/// Receives this step's activations (`[1, len, hidden]`) from the previous rank.
pub fn receive(group: &Group, shape: &[i32], dtype: Dtype) -> Result<Array, GroupError> {
    let prev = (group.rank() + group.size() - 1) % group.size();
    group.recv(shape, dtype, prev)
}

/// Sends activations on to the next rank (rank 0 after the last); evaluate it to send.
pub fn pass_on(group: &Group, h: &Array) -> Result<Array, GroupError> {
    group.send(h, (group.rank() + 1) % group.size())
}

/// MLX dtype names for the step plans.
pub fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Float32 => "f32",
        Dtype::Float16 => "f16",
        Dtype::Bfloat16 => "bf16",
        _ => "other",
    }
}

pub fn dtype_from_name(name: &str) -> Option<Dtype> {
    match name {
        "f32" => Some(Dtype::Float32),
        "f16" => Some(Dtype::Float16),
        "bf16" => Some(Dtype::Bfloat16),
        _ => None,
    }
}
