//! Control messages between rank 0 and the workers. Rank 0 decides everything; a worker
//! only joins, loads what it is told, runs the steps it is sent and reports back.

use serde::{Deserialize, Serialize};

pub use super::board::StepTimes;

/// Bumped whenever a message changes shape.
pub const PROTOCOL: u32 = 12;

/// What must be equal on every rank for them to compute together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub protocol: u32,
    /// This crate's version plus a build id: `MLX_DISTRIBUTED_BUILD_ID` at compile time, by
    /// default a digest of the sources (`build.rs`), so different code never joins.
    pub build: String,
    pub mlx: String,
}

impl Identity {
    pub fn current() -> Identity {
        Identity {
            protocol: PROTOCOL,
            build: build_id(),
            mlx: mlx_version(),
        }
    }

    /// Why `other` cannot join this rank, if it cannot.
    pub fn mismatch(&self, other: &Identity) -> Option<String> {
        (self != other).then(|| {
            format!(
                "it runs build {} with MLX {} (protocol {}), rank 0 runs build {} with MLX {} (protocol {})",
                other.build, other.mlx, other.protocol, self.build, self.mlx, self.protocol
            )
        })
    }
}

fn build_id() -> String {
    // A test hook, so a mismatched build can be simulated without building twice.
    if let Ok(fake) = std::env::var("MLX_DISTRIBUTED_FAKE_BUILD") {
        return fake;
    }
    let id = env!("MLX_DISTRIBUTED_BUILD_ID");
    format!("{}+{id}", env!("CARGO_PKG_VERSION"))
}

fn mlx_version() -> String {
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        let version = match mlx_sys::mlx_version(&mut s) {
            0 => std::ffi::CStr::from_ptr(mlx_sys::mlx_string_data(s))
                .to_string_lossy()
                .into_owned(),
            _ => "unknown".to_string(),
        };
        mlx_sys::mlx_string_free(s);
        version
    }
}

/// The parallel mode of a loaded model, with this rank's part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Part {
    /// Layers `start..end` of the model.
    Pipeline { start: usize, end: usize },
    /// Every layer, with 1/size of each layer's heads and neurons.
    Tensor,
    /// Every layer, heads and dense neurons as `Tensor`, 1/size of the routed experts whole.
    Expert,
}

impl Part {
    /// What rank `rank` of `size` holds, for people (the status page, the metrics' labels).
    pub fn describe(&self, rank: usize, size: usize) -> String {
        match self {
            Part::Pipeline { start, end } => format!("layers {start}-{}", end.saturating_sub(1)),
            Part::Tensor => format!("tensor shard {}/{size}", rank + 1),
            Part::Expert => format!("expert shard {}/{size}", rank + 1),
        }
    }
}

/// A worker's messages to rank 0.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToLeader {
    Join {
        rank: usize,
        identity: Identity,
        /// Digest of the worker's hostfile; all ranks must read the same one.
        hostfile: String,
        nonce: String,
        /// Bytes of memory free on the worker's machine, for `layer_split:auto`.
        free_memory: u64,
    },
    Proof {
        proof: String,
    },
    GroupReady,
    /// The part of load `load` (`LoadPlan::load`) is built, waiting for `Commit`.
    Loaded {
        load: u64,
        fingerprint: String,
    },
    /// Load `load` failed here. Its number tells a load that rank 0 gave up on (its caller
    /// left) from the one it waits for now.
    LoadFailed {
        load: u64,
        error: String,
    },
    Freed,
    Failed {
        error: String,
    },
    Pong,
    /// A step failed on the worker: its state can no longer be trusted.
    StepFailed {
        error: String,
    },
    Check {
        seq: u64,
        state: String,
        /// The rank's step times so far (`board::StepTimes`), for the metrics.
        #[serde(default)]
        times: Option<StepTimes>,
    },
    /// Pipeline: this rank computed step `seq`. Over the group, it is sending its activations
    /// on, so the next rank may post its receive now (a posted MLX ring receive busy-polls a
    /// core); over control messages, here they are, for rank 0 to pass on.
    Ready {
        seq: u64,
        activations: Option<Payload>,
        /// The rank's step times so far, up to this step's compute.
        #[serde(default)]
        times: Option<StepTimes>,
    },
    /// Pipeline, over control messages: the last rank's output of step `seq`, for rank 0's head.
    Output {
        seq: u64,
        activations: Payload,
        #[serde(default)]
        times: Option<StepTimes>,
    },
    /// The answer to a Probe: the model's fingerprint and weight bytes, or why it is not here.
    Probed {
        model: Result<ModelFound, String>,
        free_memory: u64,
    },
}

impl ToLeader {
    /// The step times a reply carries, if any.
    pub fn times(&self) -> Option<StepTimes> {
        match self {
            ToLeader::Check { times, .. }
            | ToLeader::Ready { times, .. }
            | ToLeader::Output { times, .. } => *times,
            _ => None,
        }
    }

    /// The reply's kind, for errors (never its payload).
    pub fn kind(&self) -> &'static str {
        match self {
            ToLeader::Join { .. } => "Join",
            ToLeader::Proof { .. } => "Proof",
            ToLeader::GroupReady => "GroupReady",
            ToLeader::Loaded { .. } => "Loaded",
            ToLeader::Freed => "Freed",
            ToLeader::Failed { .. } => "Failed",
            ToLeader::LoadFailed { .. } => "LoadFailed",
            ToLeader::Pong => "Pong",
            ToLeader::StepFailed { .. } => "StepFailed",
            ToLeader::Check { .. } => "Check",
            ToLeader::Ready { .. } => "Ready",
            ToLeader::Output { .. } => "Output",
            ToLeader::Probed { .. } => "Probed",
        }
    }
}

/// A model a worker has on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFound {
    pub fingerprint: String,
    pub weight_bytes: u64,
}

/// Rank 0's messages to a worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToWorker {
    Challenge {
        proof: String,
        nonce: String,
    },
    Accepted,
    Rejected {
        reason: String,
    },
    /// Join the MLX group (ring or jaccl) that the hostfile describes.
    InitGroup,
    /// Build this part beside the one being served; `Commit` swaps it in, `Abort` drops it.
    Load(LoadPlan),
    /// Every rank loaded the new model: serve it from the next step on.
    Commit,
    /// Some rank failed to load: drop the new part, keep serving the old one.
    Abort,
    /// In pipeline mode a worker builds the step's graph at once, and evaluates it on `Go`.
    Step(StepPlan),
    /// Pipeline: the rank before this one is sending step `seq`'s activations over the group
    /// (post the receive now; a posted ring receive busy-polls a core), or here they are.
    Go {
        seq: u64,
        activations: Option<Payload>,
    },
    Free,
    Ping,
    /// `worker check`: is this model here (never downloaded), and how much memory is free?
    Probe {
        model: String,
        model_path: Option<String>,
    },
}

/// What to load and which part of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadPlan {
    /// This load's number on the cluster, echoed in `Loaded` and `LoadFailed`.
    pub load: u64,
    pub model: String,
    pub model_path: Option<String>,
    /// The `allow_paths_outside_model_path` option: workers resolve the model by the same rule.
    #[serde(default)]
    pub allow_paths_outside_model_path: bool,
    pub weight_mode: crate::weights::WeightMode,
    /// How every rank stores its KV caches (the cache types rank 0 was given).
    #[serde(default)]
    pub kv_format: crate::cache::KvFormat,
    pub part: Part,
    /// The LoRA adapters every rank applies (each resolves them by the model's rule).
    #[serde(default)]
    pub adapters: crate::lora::AdapterPlan,
    /// `ship_model:true`: the worker takes its share from rank 0 into its cache and loads
    /// it from there, instead of reading `model` from its own disk.
    #[serde(default)]
    pub ship: Option<Shipment>,
}

/// A worker's share of a model, as rank 0 ships it: the files it lays out (their original
/// names and sizes) and the byte ranges of them it sends, each with its sha256. It travels
/// on the authenticated control channel, so the hashes come from rank 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shipment {
    /// Where rank 0 serves the bytes (`ip:port`), on a connection of their own.
    pub address: String,
    /// The model's fingerprint (config.json and safetensors headers): the cache's key.
    pub fingerprint: String,
    pub files: Vec<ShippedFile>,
    pub items: Vec<ShipItem>,
}

/// A file of the model folder, laid out at its original size (safetensors files sparse:
/// only the share's tensors are written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippedFile {
    pub name: String,
    pub size: u64,
}

/// One range of one file: a whole small file, a safetensors header, or one tensor's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShipItem {
    /// What it is, for errors and progress: the file name, `<file> header`, or the tensor's.
    pub name: String,
    /// Index into `Shipment::files`.
    pub file: usize,
    pub offset: u64,
    /// Bytes in all (of every run, when strided).
    pub len: u64,
    /// Hex sha256 of the bytes (its runs', in order, when strided).
    pub sha256: String,
    /// A tensor-mode part: runs of bytes from `offset` on, not one range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strided: Option<Strided>,
}

/// An item's bytes as runs of `run` bytes, each `stride` bytes after the one before: a
/// tensor's part cut along a later axis (its columns), one item and one sha256 per tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Strided {
    pub run: u64,
    pub stride: u64,
}

impl ShipItem {
    /// Where the item's bytes lie in its file, in order: `(offset, len)` per run.
    pub fn pieces(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (run, stride) = match self.strided {
            Some(s) => (s.run.max(1), s.stride),
            None => (self.len.max(1), 0),
        };
        (0..self.len.div_ceil(run)).map(move |k| {
            let done = k * run;
            (self.offset + k * stride, run.min(self.len - done))
        })
    }
}

/// The dtypes a pipeline hands activations on in (the models' compute dtypes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActivationDtype {
    F32,
    F16,
    Bf16,
}

impl ActivationDtype {
    /// The activations' dtype as the plan carries it; another dtype is a bug in a model.
    pub fn of(dtype: mlx_rs::Dtype) -> Result<ActivationDtype, String> {
        match dtype {
            mlx_rs::Dtype::Float32 => Ok(ActivationDtype::F32),
            mlx_rs::Dtype::Float16 => Ok(ActivationDtype::F16),
            mlx_rs::Dtype::Bfloat16 => Ok(ActivationDtype::Bf16),
            other => Err(format!(
                "activations of dtype {other:?} cannot be handed on"
            )),
        }
    }

    pub fn mlx(self) -> mlx_rs::Dtype {
        match self {
            ActivationDtype::F32 => mlx_rs::Dtype::Float32,
            ActivationDtype::F16 => mlx_rs::Dtype::Float16,
            ActivationDtype::Bf16 => mlx_rs::Dtype::Bfloat16,
        }
    }
}

/// How a pipeline step's activations go from rank to rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub dtype: ActivationDtype,
    pub relay: Relay,
}

/// The two ways activations travel between pipeline ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Relay {
    /// Over the MLX group (ring or JACCL), each receive posted on `Go` (prefill-size steps).
    Group,
    /// Inside `Go`, `Ready` and `Output`, through rank 0, into each rank's inbox: a rank hands
    /// MLX its whole step before the input arrives, and nothing polls (decode-size steps).
    Control,
}

/// Activations inside a control message: the row-major bytes of the plan's shape and dtype,
/// base64 in the JSON frame.
#[derive(Clone, PartialEq, Eq)]
pub struct Payload(pub Vec<u8>);

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.0.len())
    }
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Payload, D::Error> {
        use base64::Engine;
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(Payload)
            .map_err(serde::de::Error::custom)
    }
}

/// One forward pass over a batch of rows: every rank extends each row's caches by `len`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepPlan {
    pub seq: u64,
    /// Each row's sequence and cache position before this step.
    pub rows: Vec<PlanRow>,
    pub len: usize,
    /// The token ids (rows × len), for tensor mode (every rank embeds); empty in pipeline mode.
    pub tokens: Vec<u32>,
    /// How the activations travel (pipeline mode; none in tensor and expert modes).
    pub handoff: Option<Handoff>,
    /// Whether rank 0 needs the output (logits) of this step, or only the caches (prefill).
    pub output: bool,
    /// Report a state fingerprint after this step.
    pub check: bool,
    /// Changes to the caches since the last step, applied in order before this one.
    pub cache_ops: Vec<CacheOp>,
}

/// A change to a rank's caches that rank 0 decided; every rank applies the same ones in the
/// same order, so their prefix caches hold the same entries under the same ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheOp {
    /// Keep `slot`'s first `len` positions as prefix-cache entry `entry`.
    Save { slot: u64, entry: u64, len: usize },
    /// Start `slot` from entry `entry`'s first `len` positions.
    Restore { slot: u64, entry: u64, len: usize },
    /// The sequence in `slot` ended: drop its caches.
    Release { slot: u64 },
    /// Drop prefix-cache entry `entry`.
    Evict { entry: u64 },
    /// Entry `entry` keeps what entry `from` (a prefix of it, about to be evicted) can be cut
    /// back to: a recurrent state's checkpoints (`LayerCache::adopt`).
    Adopt { entry: u64, from: u64 },
    /// Keep only `slot`'s first `len` positions: a speculative step's rejected proposals.
    Trim { slot: u64, len: usize },
}

/// One sequence in a step: its slot and its cache position (0 starts the slot afresh).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRow {
    pub slot: u64,
    pub offset: usize,
}

/// The fingerprint of a rank's state after a step: the batch's rows, their cache positions,
/// the prefix-cache entries it holds, the model and the step's tokens, compared across ranks.
pub fn state_fingerprint(
    seq: u64,
    rows: &[PlanRow],
    entries: &[u64],
    model: &str,
    tokens: &[u32],
) -> String {
    let mut entries = entries.to_vec();
    entries.sort_unstable();
    let mut bytes = format!("{seq}:{model}:{entries:?}:").into_bytes();
    for r in rows {
        bytes.extend_from_slice(format!("{}@{};", r.slot, r.offset).as_bytes());
    }
    for t in tokens {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    super::wire::digest(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Activations cross the JSON frame as base64 and come back byte for byte; a payload
    /// that is not base64 is an error, not a guess.
    #[test]
    fn payloads_round_trip_as_base64() -> Result<(), serde_json::Error> {
        let go = ToWorker::Go {
            seq: 7,
            activations: Some(Payload((0..=255).collect())),
        };
        let text = serde_json::to_string(&go)?;
        let Ok(ToWorker::Go {
            seq: 7,
            activations: Some(back),
        }) = serde_json::from_str::<ToWorker>(&text)
        else {
            panic!("{text}");
        };
        assert_eq!(back.0, (0..=255).collect::<Vec<u8>>());
        let bad = r#"{"Output":{"seq":1,"activations":"not base64!"}}"#;
        assert!(serde_json::from_str::<ToLeader>(bad).is_err());
        Ok(())
    }
}
