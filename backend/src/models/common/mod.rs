//! Building blocks shared by the model families, each as mlx-lm computes it.

mod args;
mod attention;
mod decoder;
mod layers;
mod rope;
mod shard;

pub use args::{yes, BaseArgs, FamilyTraits};
pub use attention::{Attention, AttentionConfig};
pub use decoder::{Decoder, DecoderConfig, DecoderLayer, Head, Mlp, WeightStats};
pub use layers::{Embedding, Linear, Packed, QuantParams, RmsNorm};
pub use rope::Rope;
pub use shard::{ShardPlan, Split, TensorSplit};
