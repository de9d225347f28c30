//! Model shipping (`ship_model:true`): rank 0 sends each worker exactly its share of the
//! model (pipeline: its layers' tensors; tensor or expert mode: its part of each split tensor,
//! the rest whole; each safetensors header, config and tokenizer files) over a connection of
//! its own, authenticated like the control channel, and the worker keeps it in its cache
//! under the model's fingerprint. Each item has a sha256 from the load plan; progress is kept
//! per item, so an interrupted transfer resumes and a cached share is not sent again.

mod manifest;
mod receive;
mod serve;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use manifest::{share, Portion};
pub use receive::{receive, ReceiveOptions};
pub use serve::{corrupt_hook, listen, Shares, Shipper};

/// Bytes read from a file or the socket at a time.
const CHUNK: usize = 1 << 20;

/// Times a worker asks for an item before its load fails naming it.
const ATTEMPTS: u32 = 3;

/// Connections a worker tries before its load fails; it waits 100 ms after the first
/// failure and twice as long after each next one (1.5 s in all), so a moment's refusal
/// (rank 0 flooded by strangers) passes.
const LINK_ATTEMPTS: u32 = 5;

/// The whole handshake (hello, proofs, ask) ends within this, however the peer paces its
/// bytes.
const HANDSHAKE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Unauthenticated handshakes rank 0 runs at once; a newer one ends the oldest (which is
/// told why). Authenticated workers do not count: each rank has its own slot.
const MAX_HANDSHAKES: usize = 64;

/// Rank 0's shipping port (default: a free one).
pub const PORT_ENV: &str = "MLX_DISTRIBUTED_SHIP_PORT";

/// Overrides [`MAX_HANDSHAKES`] (tests: a flood with few slots).
pub const HANDSHAKES_ENV: &str = "MLX_DISTRIBUTED_SHIP_HANDSHAKES";

/// Frames before the proofs are checked are read through this bound.
const HANDSHAKE_MAX_BYTES: u64 = 64 << 10;

/// Overrides the worker's cache root (tests; machines whose home is small).
pub const CACHE_ENV: &str = "MLX_DISTRIBUTED_SHIP_CACHE";

/// Test hook (worker): exit abruptly once this many bytes of a transfer arrived, as a killed
/// worker would.
pub const EXIT_AFTER_ENV: &str = "MLX_DISTRIBUTED_SHIP_EXIT_AFTER";

/// Test hook (rank 0): flip a byte of the item of this name every time it is sent.
pub const CORRUPT_ENV: &str = "MLX_DISTRIBUTED_SHIP_CORRUPT";

/// The worker opens with its rank and a challenge for rank 0.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    rank: usize,
    nonce: String,
}

/// What rank 0 says during the handshake: its proof of the secret and its challenge for the
/// worker; once the worker's proof is checked, `Welcome`; or, instead of either, why it
/// closes the connection, so the worker's error names the cause rank 0 saw.
#[derive(Debug, Serialize, Deserialize)]
enum Leader {
    Challenge {
        proof: String,
        nonce: String,
    },
    Welcome,
    /// `lasting`: trying again cannot help (authentication failed, no share).
    Refused {
        reason: String,
        lasting: bool,
    },
}

/// The worker's answer to the challenge.
#[derive(Debug, Serialize, Deserialize)]
struct Proof {
    proof: String,
}

/// Once proven: the items of its shipment the worker still lacks (by index).
#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    items: Vec<usize>,
}

/// Where shipped models live on this machine: `MLX_DISTRIBUTED_SHIP_CACHE`, else
/// `~/.cache/mlx-distributed/shipped`.
pub fn cache_root() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            Error::Distributed(format!(
                "no cache for shipped models: HOME is not set (set {CACHE_ENV})"
            ))
        })?;
    Ok(PathBuf::from(home).join(".cache/mlx-distributed/shipped"))
}

/// Hex of a sha256.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
