//! Building blocks shared by the model families, each as mlx-lm computes it.

mod args;
mod attend;
mod attention;
mod decoder;
mod gated_delta;
mod indexer;
mod layer_node;
mod layers;
mod mla;
mod moe;
mod rope;
pub mod shape;
mod shard;

pub use args::{positive, positive_f32, rope_dim, yes, BaseArgs, FamilyTraits};
pub use attention::{Attention, AttentionConfig};
pub use decoder::{
    keys, AttentionBlock, Decoder, DecoderConfig, DecoderLayer, FeedForward, Head, LayerLoader,
    Mlp, Skeleton, WeightStats,
};
pub use gated_delta::{DeltaConfig, DeltaProjections, GatedDeltaNet};
pub use indexer::{Indexer, IndexerConfig, SparseLatentAttention};
pub use layer_node::supports as layer_node_supports;
pub use layers::{cpu_f32, Embedding, Linear, RmsNorm};
pub use mla::{LatentAttention, LatentConfig};
pub use moe::{
    stack_experts, Groups, Moe, MoeLayout, MoeSizes, Router, Routing, SwitchGlu, SwitchLinear,
    MAX_EXPERTS,
};
pub use rope::{yarn_attention_factor, Rope};
pub use shape::{EndShape, HeadKind, LayerShape, ModelShape};
pub use shard::{ExpertCut, RankPart, TensorCut};
