//! mlx-distributed: one model across several machines with MLX, served over LocalAI's gRPC contract.

pub mod distributed;
