//! The ranges of the integer options: each refused beyond its bound with a message naming
//! the option, the range and the value (`key:1e11` is no integer and no sensible size).

/// Seconds rank 0 waits for every worker to join (`join_timeout`).
pub const JOIN_TIMEOUT_SECS: (usize, usize) =
    (1, crate::distributed::MAX_JOIN_TIMEOUT_SECS as usize);
/// Seconds a request may wait for a batch row (`queue_timeout`).
pub const QUEUE_TIMEOUT_SECS: (usize, usize) = (1, 3600);
/// The longest `queue_timeout`, for the engine's own check.
pub const MAX_QUEUE_TIMEOUT_SECS: u64 = QUEUE_TIMEOUT_SECS.1 as u64;
/// Seconds rank 0 browses for P2P workers (`p2p_wait`, `MLX_P2P_WAIT`).
pub const P2P_WAIT_SECS: (usize, usize) = (1, crate::distributed::p2p::MAX_P2P_WAIT_SECS as usize);
/// Ranks of a P2P cluster, rank 0 included (`p2p_ranks`, `MLX_P2P_RANKS`).
pub const P2P_RANKS: (usize, usize) = (2, 1024);
/// Tokens: `max_tokens`, `max_kv_size`, `prefill_step_size`, `quantized_kv_start`.
pub const TOKENS: usize = 1 << 24;
pub const TOP_K: (usize, usize) = (0, 1 << 20);
pub const MAX_CACHE_ENTRIES: (usize, usize) = (0, 100_000);
/// MiB of KV memory (16 TiB).
pub const KV_MEMORY_MB: (usize, usize) = (1, 1 << 24);
pub const MAX_BATCH: (usize, usize) = (1, 1024);
pub const MAX_QUEUE: (usize, usize) = (0, 1_000_000);
pub const PORT: (usize, usize) = (1, 65535);
