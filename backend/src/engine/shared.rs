//! State the engine thread publishes for readers that must not wait behind a generation
//! (Health, Status, metrics, tokenizing).

use std::sync::Arc;

use crate::prefix_cache::CacheStats;

use crate::options::LoadConfig;
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineState {
    /// No model loaded.
    Uninitialized,
    Loading,
    /// A model is loaded and idle.
    Ready,
    /// A model is loaded and generating.
    Busy,
    /// The last load failed.
    Error,
    /// A rank was lost; `last_error` names it. LoadModel forms the cluster again.
    Degraded,
    /// The engine thread has ended (the process is stopping); `last_error` says why.
    Stopped,
    /// The engine thread ended on a panic it could not recover from; `last_error` names it.
    /// Only a restart helps, so Health says so.
    Failed,
}

/// The loaded model, as far as the gRPC layer needs to know it.
#[derive(Clone)]
pub struct ModelInfo {
    pub config: LoadConfig,
    pub tokenizer: Arc<Tokenizer>,
    /// The longest prompt plus generation the model accepts.
    pub context: usize,
    /// The parameters rank 0 holds.
    pub weights: crate::models::common::WeightStats,
}

/// Counters since the model was loaded.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub requests: u64,
    pub prompt_tokens_processed: u64,
    pub tokens_generated: u64,
    /// Decode speed of the last request.
    pub last_tokens_per_second: f64,
    pub prefix_cache: CacheStats,
    /// KV bytes held for the requests running now.
    pub kv_reserved_bytes: usize,
}

#[derive(Clone)]
pub struct Snapshot {
    pub state: EngineState,
    pub model: Option<ModelInfo>,
    pub metrics: Metrics,
    pub last_error: Option<String>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            state: EngineState::Uninitialized,
            model: None,
            metrics: Metrics::default(),
            last_error: None,
        }
    }
}
