//! `LoadConfig`: what LoadModel decides, one nested struct per concern, as the option
//! table groups the options that set it.

use std::path::PathBuf;

use super::{Env, LoadRequest, P2pConfig, Token};
use crate::cache::KvFormat;
use crate::distributed::Transport;
use crate::lora::AdapterPlan;
use crate::speculative::{Drafting, DEFAULT_DRAFT_TOKENS};
use crate::weights::{Numerics, WeightMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    Pipeline,
    Tensor,
    /// Tensor parallelism, but each rank holds whole experts (1/size of them) instead of a
    /// slice of every expert.
    Expert,
}

/// Request defaults and overrides from load options, as LocalAI's mlx backend applies them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplingOverrides {
    /// A default: used when a request's Tokens is 0.
    pub max_tokens: Option<usize>,
    /// The rest override the request's values, as in LocalAI.
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
}

/// Limits on contexts, batches, queues and KV memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// The context length requests are checked against (ModelOptions.ContextSize, else the model's).
    pub context_size: Option<usize>,
    pub max_kv_size: Option<usize>,
    pub max_cache_entries: usize,
    /// KV memory for running requests and the prefix cache together (default: half the
    /// memory free after loading).
    pub kv_memory_mb: Option<usize>,
    pub max_batch: usize,
    /// Requests that may wait for a batch row; more get RESOURCE_EXHAUSTED at once.
    pub max_queue: usize,
    /// A request that waits longer than this for a row is failed.
    pub queue_timeout_secs: u64,
    pub prefill_step: usize,
}

/// Speculative decoding on rank 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Speculation {
    /// Where proposals come from (option `speculative`).
    pub drafting: Drafting,
    /// Proposals per step unless a request's `NDraft` says (option `num_draft_tokens`).
    pub draft_tokens: usize,
    /// The draft model (`ModelOptions.DraftModel`), loaded on rank 0 only.
    pub draft_model: Option<String>,
}

/// Where the ranks are and how the model is spread over them.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterOptions {
    pub hostfile: Option<PathBuf>,
    pub transport: Transport,
    /// None: the transport's default (ring: pipeline, jaccl: tensor).
    pub parallelism: Option<Parallelism>,
    pub layer_split: Option<String>,
    /// How long rank 0 waits for every worker to join.
    pub join_timeout_secs: u64,
    /// Rank 0's control port (default: its ring port + 1, or the coordinator's + 1).
    pub control_port: Option<u16>,
    /// JACCL: rank 0's coordinator `ip:port` (`MLX_JACCL_COORDINATOR`).
    pub coordinator: Option<String>,
    /// The control channel's secret (`MLX_DISTRIBUTED_TOKEN`, or the P2P token; else the
    /// hostfile's digest).
    pub token: Option<Token>,
}

/// Sending the model to workers that lack it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shipping {
    /// `ship_model:true`: rank 0 sends each worker its share of the model (any mode),
    /// which workers keep in their cache; no worker needs the model on its own disk.
    pub ship_model: bool,
}

/// Live metrics and the status page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsOptions {
    /// Where rank 0 serves `/metrics` and the status page (option `metrics_addr`, `ip:port`).
    pub addr: Option<std::net::SocketAddr>,
}

/// Everything LoadModel decides, grouped as the option table's groups are.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadConfig {
    /// `ModelOptions.Model`: a folder or repo id; also the model identity.
    pub model: String,
    /// `ModelOptions.ModelPath`: LocalAI's models folder.
    pub model_path: Option<PathBuf>,
    /// Lets a relative model leave `model_path` through `..` or a symbolic link (off: a
    /// client may name a model, not any folder on the machine).
    pub allow_paths_outside_model_path: bool,
    pub trust_remote_code: bool,
    pub weight_mode: WeightMode,
    /// How packed weights multiply on the CPU (`cpu_numerics`, else its variable, else
    /// `int8`); settled into `weight_mode`.
    pub cpu_numerics: Option<Numerics>,
    /// Words that make a request's grammar lazy: unconstrained until one appears in the output.
    pub grammar_triggers: Vec<String>,
    pub sampling: SamplingOverrides,
    pub limits: Limits,
    /// How every rank stores its KV caches (`CacheTypeKey`/`CacheTypeValue`, `kv_bits`...).
    pub kv: KvFormat,
    pub spec: Speculation,
    /// LoRA adapters on the model, the same on every rank (`ModelOptions.LoraAdapter(s)`,
    /// `LoraScale(s)`, option `fuse`).
    pub adapters: AdapterPlan,
    pub cluster: ClusterOptions,
    pub shipping: Shipping,
    pub metrics: MetricsOptions,
    /// No hostfile and a P2P token: rank 0 finds its workers over mDNS.
    pub p2p: Option<P2pConfig>,
}

impl LoadConfig {
    /// What a request gets without options (the coordinator and token from `env`).
    pub(super) fn defaults(req: &LoadRequest, env: &dyn Env) -> LoadConfig {
        LoadConfig {
            model: req.model.clone(),
            model_path: Some(PathBuf::from(&req.model_path)).filter(|p| !p.as_os_str().is_empty()),
            allow_paths_outside_model_path: false,
            trust_remote_code: req.trust_remote_code,
            weight_mode: WeightMode::default_for_device(),
            cpu_numerics: None,
            grammar_triggers: req
                .grammar_triggers
                .iter()
                .filter(|t| !t.is_empty())
                .cloned()
                .collect(),
            sampling: SamplingOverrides::default(),
            limits: Limits {
                context_size: (req.context_size > 0).then_some(req.context_size as usize),
                max_kv_size: None,
                max_cache_entries: 10,
                kv_memory_mb: None,
                max_batch: 8,
                max_queue: 64,
                queue_timeout_secs: 600,
                prefill_step: 2048,
            },
            kv: KvFormat::default(),
            spec: Speculation {
                drafting: Drafting::Off,
                draft_tokens: DEFAULT_DRAFT_TOKENS,
                draft_model: None,
            },
            adapters: AdapterPlan::default(),
            cluster: ClusterOptions {
                hostfile: None,
                transport: Transport::Ring,
                parallelism: None,
                layer_split: None,
                join_timeout_secs: 30,
                control_port: None,
                coordinator: super::env::fallback(env, "coordinator").map(|(_, v)| v),
                token: env.var("MLX_DISTRIBUTED_TOKEN").map(Token),
            },
            shipping: Shipping::default(),
            metrics: MetricsOptions::default(),
            p2p: None,
        }
    }
}

impl ClusterOptions {
    /// The parallel mode: the option, else ring → pipeline and jaccl → tensor. Options never
    /// choose `Any`; were it set, pipeline is the mode that runs over every transport.
    pub fn effective_parallelism(&self) -> Parallelism {
        self.parallelism.unwrap_or(match self.transport {
            Transport::Ring | Transport::Any => Parallelism::Pipeline,
            Transport::Jaccl => Parallelism::Tensor,
        })
    }

    /// The parallel mode for a model with `experts` routed experts (if a mixture) over `ranks`
    /// ranks: as [`Self::effective_parallelism`], except that a mixture whose default would be
    /// tensor runs expert-parallel when its experts divide over the ranks (1.75-3.5x tensor's
    /// decode on two ranks here; README, Benchmark).
    pub fn parallelism_for(&self, experts: Option<u64>, ranks: usize) -> Parallelism {
        let chosen = self.effective_parallelism();
        let divides = experts.is_some_and(|e| e > 0 && e % ranks.max(1) as u64 == 0);
        match (self.parallelism, chosen, divides) {
            (None, Parallelism::Tensor, true) => Parallelism::Expert,
            _ => chosen,
        }
    }
}
