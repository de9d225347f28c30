//! mlx-distributed: one model across several machines with MLX, served over LocalAI's gRPC contract.

pub mod cache;
pub mod chat_output;
pub mod distributed;
pub mod engine;
pub mod error;
pub mod generate;
pub mod grammar;
pub mod grpc;
pub mod lifecycle;
pub mod loader;
pub mod memory;
pub mod models;
pub mod options;
pub mod parent_watch;
pub mod prefix_cache;
pub mod progress;
pub mod request;
pub mod sampling;
pub mod sequence;
pub mod server;
pub mod source;
pub mod speculative;
pub mod stopping;
pub mod tokenizer;
pub mod weights;
