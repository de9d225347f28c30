//! LoadModel's `Options` ("key:value" strings from the model YAML) and environment fallbacks,
//! parsed into a `LoadConfig`. Values are inferred as LocalAI does: bool, int, float, string.

use crate::speculative::{Drafting, DEFAULT_DRAFT_TOKENS};
use std::path::PathBuf;

use crate::cache::{KvEncoding, KvFormat, CACHE_TYPES};
use crate::distributed::Transport;
use crate::lora::{AdapterPlan, AdapterSpec, Merge};
use crate::weights::WeightMode;

mod p2p;
pub mod table;

pub use p2p::P2pConfig;
use p2p::P2pGiven;
pub use table::{option_names, OptionSpec, OPTIONS};

/// An option's value, typed as LocalAI's `parse_options` types it.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl OptionValue {
    fn parse(raw: &str) -> OptionValue {
        match raw.to_ascii_lowercase().as_str() {
            "true" => return OptionValue::Bool(true),
            "false" => return OptionValue::Bool(false),
            _ => {}
        }
        let digits = raw.replace('_', "");
        if let Ok(i) = digits.parse::<i64>() {
            return OptionValue::Int(i);
        }
        match digits.parse::<f64>() {
            Ok(f) => OptionValue::Float(f),
            Err(_) => OptionValue::Str(raw.to_string()),
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            OptionValue::Int(i) => Some(*i as f64),
            OptionValue::Float(f) => Some(*f),
            _ => None,
        }
    }
}

/// The value as written (a string quoted and cut by `error::quote`), for error messages.
impl std::fmt::Display for OptionValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Int(i) => write!(f, "{i}"),
            OptionValue::Float(x) => write!(f, "{x}"),
            OptionValue::Str(s) => write!(f, "\"{}\"", crate::error::quote(s)),
        }
    }
}

/// The ranges of the integer options: each refused beyond its bound with a message naming
/// the option, the range and the value (`key:1e11` is no integer and no sensible size).
pub mod bounds {
    /// Seconds rank 0 waits for every worker to join (`join_timeout`).
    pub const JOIN_TIMEOUT_SECS: (usize, usize) =
        (1, crate::distributed::MAX_JOIN_TIMEOUT_SECS as usize);
    /// Seconds a request may wait for a batch row (`queue_timeout`).
    pub const QUEUE_TIMEOUT_SECS: (usize, usize) = (1, 3600);
    /// The longest `queue_timeout`, for the engine's own check.
    pub const MAX_QUEUE_TIMEOUT_SECS: u64 = QUEUE_TIMEOUT_SECS.1 as u64;
    /// Seconds rank 0 browses for P2P workers (`p2p_wait`, `MLX_P2P_WAIT`).
    pub const P2P_WAIT_SECS: (usize, usize) =
        (1, crate::distributed::p2p::MAX_P2P_WAIT_SECS as usize);
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
}

/// An integer in `[lo, hi]`.
fn int_in(v: &OptionValue, (lo, hi): (usize, usize)) -> Option<usize> {
    match v {
        OptionValue::Int(i) => usize::try_from(*i).ok().filter(|n| (lo..=hi).contains(n)),
        _ => None,
    }
}

/// What an integer option expects: "an integer in [lo, hi]" and the unit, if any.
fn range_text((lo, hi): (usize, usize), unit: &str) -> String {
    match unit {
        "" => format!("an integer in [{lo}, {hi}]"),
        unit => format!("a whole number of {unit} in [{lo}, {hi}]"),
    }
}

/// Splits each entry at its first ':' and trims both sides; entries without ':' are skipped.
pub fn parse_options(options: &[String]) -> Vec<(String, OptionValue)> {
    options
        .iter()
        .filter_map(|o| o.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), OptionValue::parse(v.trim())))
        .collect()
}

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

/// The process environment the fallbacks come from (injectable for tests).
pub trait Env {
    fn var(&self, key: &str) -> Option<String>;
}

pub struct ProcessEnv;

/// An empty environment, for tests that must not see the process's.
#[cfg(test)]
pub(crate) struct NoEnv;

#[cfg(test)]
impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

/// The settings rank 0 was started with: the command line's values, by the variable each
/// stands for, over the process environment. The CLI hands them over in this struct, never
/// with `set_var` while other threads run. No `Debug`: it may hold the token.
#[derive(Clone, Default)]
pub struct Settings {
    given: std::collections::BTreeMap<&'static str, String>,
}

impl Settings {
    /// `value` stands for the variable `key` from now on.
    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Settings {
        self.given.insert(key, value.into());
        self
    }
}

impl Env for Settings {
    fn var(&self, key: &str) -> Option<String> {
        match self.given.get(key) {
            Some(v) => Some(v.clone()).filter(|v| !v.is_empty()),
            None => ProcessEnv.var(key),
        }
    }
}

/// The control channel's shared secret (`MLX_DISTRIBUTED_TOKEN`); never printed.
#[derive(Clone, PartialEq)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }
}

/// What LoadModel was given, before parsing.
#[derive(Debug, Clone, Default)]
pub struct LoadRequest {
    pub model: String,
    pub model_path: String,
    pub options: Vec<String>,
    pub context_size: i32,
    pub trust_remote_code: bool,
    /// `ModelOptions.GrammarTriggers`' words.
    pub grammar_triggers: Vec<String>,
    /// `ModelOptions.CacheTypeKey`/`CacheTypeValue` (llama.cpp's names: f16, q8_0, q4_0...).
    pub cache_type_key: String,
    pub cache_type_value: String,
    /// `ModelOptions.DraftModel`: a folder or repo id with the same tokenizer.
    pub draft_model: String,
    /// `ModelOptions.LoraAdapter` and `LoraScale` (0: 1.0).
    pub lora_adapter: String,
    pub lora_scale: f32,
    /// `ModelOptions.LoraAdapters` and `LoraScales` (none: 1.0 each).
    pub lora_adapters: Vec<String>,
    pub lora_scales: Vec<f32>,
    /// `ModelOptions.LoraBase` (llama.cpp's float base for a quantized model's adapter).
    pub lora_base: String,
}

/// Builds an option's error from what it expected.
type Bad<'a> = dyn Fn(&str) -> String + 'a;

/// The cluster options a request gave; what it did not give falls back to the settings.
#[derive(Default)]
struct ClusterGiven {
    hostfile: Option<String>,
    transport: Option<Transport>,
    control_port: Option<u16>,
}

/// The adapters a request names: `LoraAdapter` (at `LoraScale`, 0 meaning 1) then each of
/// `LoraAdapters` (at its `LoraScales` entry; none given: 1 each).
fn adapters_of(req: &LoadRequest) -> Result<Vec<AdapterSpec>, String> {
    if !req.lora_base.trim().is_empty() {
        return Err(
            "ModelOptions.LoraBase is not read by this backend: it names llama.cpp's float \
             base model for an adapter, and here every adapter is applied over the loaded \
             model's own weights, whatever their dtype (remove `lora_base`)"
                .into(),
        );
    }
    let (names, scales) = (&req.lora_adapters, &req.lora_scales);
    if !scales.is_empty() && scales.len() != names.len() {
        return Err(format!(
            "ModelOptions.LoraScales has {} values for {} LoraAdapters: give one per adapter, \
             or none for 1.0 each",
            scales.len(),
            names.len()
        ));
    }
    let single = (!req.lora_adapter.trim().is_empty()).then(|| {
        let scale = if req.lora_scale == 0.0 {
            1.0
        } else {
            req.lora_scale
        };
        (req.lora_adapter.trim(), scale, "LoraScale")
    });
    let listed = names.iter().enumerate().map(|(i, name)| {
        (
            name.trim(),
            scales.get(i).copied().unwrap_or(1.0),
            "LoraScales",
        )
    });
    single
        .into_iter()
        .chain(listed)
        .map(|(name, scale, field)| {
            if name.is_empty() {
                return Err("ModelOptions.LoraAdapters has an empty name".to_string());
            }
            if !scale.is_finite() {
                return Err(format!(
                    "ModelOptions.{field}: {scale} is not a finite number"
                ));
            }
            Ok(AdapterSpec {
                name: name.to_string(),
                scale,
            })
        })
        .collect()
}

/// `kv_bits` sets both sides of the KV cache; beside a `cache_type_*` option or a
/// `CacheTypeKey`/`CacheTypeValue` field one of them would be dropped silently, so it is a
/// conflict naming both.
fn check_kv_conflict(req: &LoadRequest, options: &[(String, OptionValue)]) -> Result<(), String> {
    if !options.iter().any(|(k, _)| k == "kv_bits") {
        return Ok(());
    }
    let named = |key: &str| options.iter().any(|(k, _)| k == key);
    let other = [
        ("the option `cache_type_k`", named("cache_type_k")),
        ("the option `cache_type_v`", named("cache_type_v")),
        (
            "ModelOptions.CacheTypeKey",
            !req.cache_type_key.trim().is_empty(),
        ),
        (
            "ModelOptions.CacheTypeValue",
            !req.cache_type_value.trim().is_empty(),
        ),
    ]
    .into_iter()
    .find(|(_, set)| *set);
    match other {
        Some((what, _)) => Err(format!(
            "the option `kv_bits` and {what} both set how the KV cache is stored: keep one"
        )),
        None => Ok(()),
    }
}

/// Unknown option keys, each logged once: a YAML of millions of entries logs at most
/// `UNKNOWN_LOGGED` lines and a count of the rest.
#[derive(Default)]
struct UnknownOptions {
    keys: std::collections::BTreeSet<String>,
    more: usize,
}

/// The most distinct unknown keys a load logs by name.
const UNKNOWN_LOGGED: usize = 32;

impl UnknownOptions {
    fn note(&mut self, key: &str) {
        if self.keys.contains(key) {
            return;
        }
        match self.keys.len() < UNKNOWN_LOGGED {
            true => drop(self.keys.insert(key.to_string())),
            false => self.more += 1,
        }
    }

    fn log(&self) {
        for key in &self.keys {
            match table::nearest(key) {
                Some(near) => tracing::warn!(
                    option = %crate::error::quote(key),
                    did_you_mean = near,
                    "unknown option ignored"
                ),
                None => {
                    tracing::warn!(option = %crate::error::quote(key), "unknown option ignored")
                }
            }
        }
        if self.more > 0 {
            tracing::warn!(
                more = self.more,
                "more unknown option entries ignored (not named)"
            );
        }
    }
}

/// The request's own fields, before any option.
fn check_request(req: &LoadRequest) -> Result<(), String> {
    if req.model.trim().is_empty() {
        return Err(
            "ModelOptions.Model is empty: name a model folder or a Hugging Face repo id".into(),
        );
    }
    if req.context_size < 0 {
        return Err(format!(
            "ContextSize must not be negative (got {})",
            req.context_size
        ));
    }
    Ok(())
}

impl LoadConfig {
    /// Parses and validates; a known option with a bad value is an error naming it, at most
    /// 1 KiB long (`error::bounded`) whatever the request quoted.
    pub fn from_request(req: &LoadRequest, env: &dyn Env) -> Result<LoadConfig, String> {
        LoadConfig::parse_request(req, env).map_err(|e| crate::error::bounded(&e).into_owned())
    }

    fn parse_request(req: &LoadRequest, env: &dyn Env) -> Result<LoadConfig, String> {
        check_request(req)?;
        let mut c = LoadConfig::defaults(req, env);
        let cache_type = |field: &str, name: &str| {
            KvEncoding::parse(name).map_err(|e| format!("ModelOptions.{field}: {e}"))
        };
        c.kv.keys = cache_type("CacheTypeKey", &req.cache_type_key)?;
        c.kv.values = cache_type("CacheTypeValue", &req.cache_type_value)?;
        let mut given = ClusterGiven::default();
        let mut p2p = P2pGiven::default();
        let options = parse_options(&req.options);
        let drafting_given = options.iter().any(|(k, _)| k == "speculative");
        let fuse_given = options.iter().any(|(k, _)| k == "fuse");
        check_kv_conflict(req, &options)?;
        let mut unknown = UnknownOptions::default();
        for (key, value) in options {
            let bad = |want: &str| {
                let text = format!(
                    "option `{}`: expected {want}, got {value}",
                    crate::error::quote(&key),
                );
                crate::error::bounded(&text).into_owned()
            };
            match table::find(&key) {
                Some(spec) => c.set(spec, &value, &bad, &mut given, &mut p2p)?,
                None => unknown.note(&key),
            }
        }
        unknown.log();
        c.set_cluster_fallbacks(given, env)?;
        c.p2p = p2p.settle(c.cluster.hostfile.is_some(), env)?;
        if let Some(p) = &c.p2p {
            c.cluster.token = Some(p.token.clone());
        }
        c.settle_drafting(&req.draft_model, drafting_given)?;
        c.adapters.adapters = adapters_of(req)?;
        c.check_shipping()?;
        if fuse_given && c.adapters.adapters.is_empty() {
            return Err("the option `fuse` applies to LoRA adapters, and \
                        ModelOptions.LoraAdapter(s) names none"
                .into());
        }
        Ok(c)
    }

    /// Hands a known option to its group's setter; a row no setter takes is an error (the
    /// unit test `every_option_in_the_table_has_a_setter` keeps it from happening).
    fn set(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
        given: &mut ClusterGiven,
        p2p: &mut P2pGiven,
    ) -> Result<(), String> {
        use table::Group;
        let taken = match spec.group {
            Group::Sampling => self.set_sampling(spec, value, bad)?,
            Group::Engine => self.set_engine(spec, value, bad)?,
            Group::Kv => self.set_kv(spec, value, bad)?,
            Group::Speculation => self.set_speculation(spec, value, bad)?,
            Group::Adapters => self.set_adapters(spec, value, bad)?,
            Group::Cluster => self.set_cluster(spec, value, bad, given)?,
            Group::Metrics => self.set_metrics(spec, value, bad)?,
            Group::P2p => p2p.set(spec, value, bad)?,
        };
        match taken {
            true => Ok(()),
            false => Err(format!("option `{}` has no setter in its group", spec.name)),
        }
    }

    /// `metrics_addr`: an `ip:port` to serve the metrics and status page on.
    fn set_metrics(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        if spec.name != "metrics_addr" {
            return Ok(false);
        }
        let addr = match value {
            OptionValue::Str(v) => v.parse().ok(),
            _ => None,
        };
        self.metrics.addr = Some(addr.ok_or_else(|| bad("an ip:port such as 127.0.0.1:9090"))?);
        Ok(true)
    }

    /// LoRA: `fuse` (true: into dense weights at load; false: at run time everywhere).
    fn set_adapters(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        if spec.name != "fuse" {
            return Ok(false);
        }
        self.adapters.merge = match bool_of(value).ok_or_else(|| bad("true or false"))? {
            true => Merge::Fuse,
            false => Merge::RunTime,
        };
        Ok(true)
    }

    /// A DraftModel drafts unless the `speculative` option says otherwise, which is then an
    /// error (the model would be loaded for nothing); `speculative:draft` needs one.
    fn settle_drafting(&mut self, draft_model: &str, given: bool) -> Result<(), String> {
        let draft = draft_model.trim();
        self.spec.draft_model = (!draft.is_empty()).then(|| draft.to_string());
        match (self.spec.draft_model.is_some(), self.spec.drafting) {
            (true, Drafting::Off) if !given => self.spec.drafting = Drafting::Model,
            (true, Drafting::Model) | (false, Drafting::Off | Drafting::Ngram) => {}
            (true, other) => {
                return Err(format!(
                    "ModelOptions.DraftModel is set, but the option `speculative` is {other:?}: \
                     remove one of them"
                ))
            }
            (false, Drafting::Model) => {
                return Err(
                    "the option `speculative:draft` needs ModelOptions.DraftModel (draft_model)"
                        .into(),
                )
            }
        }
        Ok(())
    }

    /// What a request gets without options (the coordinator and token from `env`).
    fn defaults(req: &LoadRequest, env: &dyn Env) -> LoadConfig {
        LoadConfig {
            model: req.model.clone(),
            model_path: Some(PathBuf::from(&req.model_path)).filter(|p| !p.as_os_str().is_empty()),
            allow_paths_outside_model_path: false,
            trust_remote_code: req.trust_remote_code,
            weight_mode: WeightMode::default_for_device(),
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
                coordinator: env.var("MLX_JACCL_COORDINATOR"),
                token: env.var("MLX_DISTRIBUTED_TOKEN").map(Token),
            },
            shipping: Shipping::default(),
            metrics: MetricsOptions::default(),
            p2p: None,
        }
    }

    /// The sampling defaults; false when `key` is not one of them.
    fn set_sampling(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        let s = &mut self.sampling;
        match spec.name {
            "max_tokens" => s.max_tokens = Some(spec.int(value, bad)?),
            "temperature" => s.temperature = Some(spec.number(value, bad)?),
            "top_p" => s.top_p = Some(spec.number(value, bad)?),
            "min_p" => s.min_p = Some(spec.number(value, bad)?),
            "top_k" => s.top_k = Some(spec.int(value, bad)?),
            "seed" => match *value {
                OptionValue::Int(i) => s.seed = Some(i as u64),
                _ => return Err(bad("an integer")),
            },
            "repetition_penalty" => s.repetition_penalty = Some(spec.number(value, bad)?),
            "presence_penalty" => s.presence_penalty = Some(spec.number(value, bad)?),
            "frequency_penalty" => s.frequency_penalty = Some(spec.number(value, bad)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Weights, limits and the prefix cache; false when `key` is not one of them.
    fn set_engine(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        let c = self;
        match spec.name {
            "allow_paths_outside_model_path" => {
                c.allow_paths_outside_model_path =
                    bool_of(value).ok_or_else(|| bad("true or false"))?
            }
            "trust_remote_code" => {
                c.trust_remote_code = bool_of(value).ok_or_else(|| bad("true or false"))?
            }
            "dequantize" => {
                c.weight_mode = match bool_of(value).ok_or_else(|| bad("true or false"))? {
                    true => WeightMode::DequantizeF32,
                    false => WeightMode::default_for_device(),
                }
            }
            "max_kv_size" => c.limits.max_kv_size = Some(spec.int(value, bad)?),
            "max_cache_entries" => c.limits.max_cache_entries = spec.int(value, bad)?,
            "kv_memory_mb" => c.limits.kv_memory_mb = Some(spec.int(value, bad)?),
            "max_batch" => c.limits.max_batch = spec.int(value, bad)?,
            "max_queue" => c.limits.max_queue = spec.int(value, bad)?,
            "queue_timeout" => c.limits.queue_timeout_secs = spec.int(value, bad)? as u64,
            "prefill_step_size" => c.limits.prefill_step = spec.int(value, bad)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Speculative decoding: `speculative` (`ngram`, `draft`, `off`) and `num_draft_tokens` (mlx-lm's
    /// name); false when `key` is neither.
    fn set_speculation(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        match spec.name {
            "speculative" => {
                let name = match value {
                    OptionValue::Str(s) => s.as_str(),
                    OptionValue::Bool(false) => "off",
                    _ => "",
                };
                self.spec.drafting =
                    Drafting::parse(name).ok_or_else(|| bad("`ngram`, `draft` or `off`"))?
            }
            "num_draft_tokens" => self.spec.draft_tokens = spec.int(value, bad)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// How KV caches are stored: llama.cpp's `cache_type_k`/`cache_type_v` names, or mlx-lm's
    /// `kv_bits`, `kv_group_size` and `quantized_kv_start`; false when `key` is none of them.
    fn set_kv(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        let f = &mut self.kv;
        let name = |v: &OptionValue| match v {
            OptionValue::Str(s) => KvEncoding::parse(s).map_err(|e| bad(&e)),
            _ => Err(bad(&format!("one of {CACHE_TYPES}"))),
        };
        match spec.name {
            "cache_type_k" => f.keys = name(value)?,
            "cache_type_v" => f.values = name(value)?,
            "kv_bits" => {
                let bits = match value {
                    OptionValue::Int(i) => KvEncoding::affine(*i).map_err(|e| bad(&e))?,
                    _ => return Err(bad("2, 3, 4, 5, 6 or 8")),
                };
                (f.keys, f.values) = (bits, bits);
            }
            "kv_group_size" => {
                f.group_size = match value {
                    OptionValue::Int(i) => KvFormat::group_size_of(*i).map_err(|e| bad(&e))?,
                    _ => return Err(bad("32, 64 or 128")),
                }
            }
            "quantized_kv_start" => {
                f.quantized_start = spec
                    .int(value, bad)?
                    .try_into()
                    .map_err(|_| bad("a smaller integer"))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Where and how the model is spread; false when `key` is not about that.
    fn set_cluster(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
        given: &mut ClusterGiven,
    ) -> Result<bool, String> {
        let c = &mut self.cluster;
        match spec.name {
            "hostfile" => match value {
                OptionValue::Str(p) => given.hostfile = Some(p.clone()),
                _ => return Err(bad("a path")),
            },
            "distributed_backend" => {
                given.transport = Some(transport_of(value).ok_or_else(|| bad("ring or jaccl"))?)
            }
            "parallelism" => {
                c.parallelism = Some(match &value {
                    OptionValue::Str(v) if v == "pipeline" => Parallelism::Pipeline,
                    OptionValue::Str(v) if v == "tensor" => Parallelism::Tensor,
                    OptionValue::Str(v) if v == "expert" => Parallelism::Expert,
                    _ => return Err(bad("pipeline, tensor or expert")),
                })
            }
            "layer_split" => {
                c.layer_split = Some(match &value {
                    OptionValue::Str(v) => v.clone(),
                    OptionValue::Int(i) => i.to_string(),
                    _ => return Err(bad("\"auto\" or comma-separated layer counts")),
                })
            }
            "ship_model" => {
                self.shipping.ship_model = bool_of(value).ok_or_else(|| bad("true or false"))?
            }
            "join_timeout" => c.join_timeout_secs = spec.int(value, bad)? as u64,
            "control_port" => {
                given.control_port = Some(
                    spec.int(value, bad)?
                        .try_into()
                        .map_err(|_| bad("a port number"))?,
                )
            }
            "coordinator" => match value {
                OptionValue::Str(v) if v.contains(':') => c.coordinator = Some(v.clone()),
                _ => return Err(bad("the JACCL coordinator's ip:port")),
            },
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `ship_model` needs workers to ship to, and ships the checkpoint alone.
    fn check_shipping(&self) -> Result<(), String> {
        if !self.shipping.ship_model {
            return Ok(());
        }
        if self.cluster.hostfile.is_none() {
            return Err(
                "option `ship_model`: there is no cluster to ship to (no hostfile \
                        option or MLX_DISTRIBUTED_HOSTFILE)"
                    .into(),
            );
        }
        if !self.adapters.adapters.is_empty() {
            return Err(
                "option `ship_model`: LoRA adapters are not shipped; give every \
                        machine the adapters, or load without them"
                    .into(),
            );
        }
        Ok(())
    }

    /// The hostfile, transport and control port the options did not give, from `env`.
    fn set_cluster_fallbacks(&mut self, given: ClusterGiven, env: &dyn Env) -> Result<(), String> {
        self.cluster.control_port = match given.control_port {
            Some(p) => Some(p),
            None => match env.var("MLX_DISTRIBUTED_CONTROL_PORT") {
                Some(v) => Some(v.parse().map_err(|_| {
                    format!("MLX_DISTRIBUTED_CONTROL_PORT: expected a port number, got {v:?}")
                })?),
                None => None,
            },
        };
        self.cluster.hostfile = given
            .hostfile
            .or_else(|| env.var("MLX_DISTRIBUTED_HOSTFILE"))
            .map(PathBuf::from);
        self.cluster.transport = match given.transport {
            Some(t) => t,
            None => match env.var("MLX_DISTRIBUTED_BACKEND") {
                Some(v) => transport_of(&OptionValue::Str(v.clone())).ok_or_else(|| {
                    format!("MLX_DISTRIBUTED_BACKEND: expected ring or jaccl, got {v:?}")
                })?,
                None => Transport::Ring,
            },
        };
        Ok(())
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

fn transport_of(v: &OptionValue) -> Option<Transport> {
    match v {
        OptionValue::Str(s) if s == "ring" => Some(Transport::Ring),
        OptionValue::Str(s) if s == "jaccl" => Some(Transport::Jaccl),
        _ => None,
    }
}

fn bool_of(v: &OptionValue) -> Option<bool> {
    match v {
        OptionValue::Bool(b) => Some(*b),
        OptionValue::Int(0) => Some(false),
        OptionValue::Int(1) => Some(true),
        _ => None,
    }
}

/// An integer option in its range, or the error naming the option, range and value.
fn int_option(
    v: &OptionValue,
    range: (usize, usize),
    unit: &str,
    bad: &Bad,
) -> Result<usize, String> {
    int_in(v, range).ok_or_else(|| bad(&range_text(range, unit)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct FakeEnv(HashMap<&'static str, &'static str>);

    impl Env for FakeEnv {
        fn var(&self, key: &str) -> Option<String> {
            self.0.get(key).map(|v| v.to_string())
        }
    }

    fn load(options: &[&str], env: &[(&'static str, &'static str)]) -> Result<LoadConfig, String> {
        let req = LoadRequest {
            model: "m".into(),
            options: options.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        LoadConfig::from_request(&req, &FakeEnv(env.iter().copied().collect()))
    }

    /// `metrics_addr` takes an ip:port; anything else is an error naming the option.
    #[test]
    fn metrics_addr_is_an_ip_and_port() -> Result<(), String> {
        let c = load(&["metrics_addr:127.0.0.1:9090"], &[])?;
        assert_eq!(c.metrics.addr, "127.0.0.1:9090".parse().ok());
        assert_eq!(load(&[], &[])?.metrics.addr, None);
        for bad in [
            "metrics_addr:9090",
            "metrics_addr:localhost",
            "metrics_addr:true",
        ] {
            let e = load(&[bad], &[]).err().unwrap_or_default();
            assert!(e.contains("`metrics_addr`") && e.contains("ip:port"), "{e}");
        }
        Ok(())
    }

    /// LocalAI's cache type fields, then options over them; bad names and sizes are errors
    /// naming the field or option.
    #[test]
    fn lora_adapters_scales_and_fuse() -> Result<(), String> {
        let load = |req: LoadRequest| LoadConfig::from_request(&req, &NoEnv);
        let base = LoadRequest {
            model: "m".into(),
            ..Default::default()
        };
        let c = load(LoadRequest {
            lora_adapter: "one".into(),
            lora_adapters: vec!["two".into(), "three".into()],
            lora_scales: vec![0.5, -1.0],
            options: vec!["fuse:false".into()],
            ..base.clone()
        })?;
        let got: Vec<(&str, f32)> = (c.adapters.adapters.iter())
            .map(|a| (a.name.as_str(), a.scale))
            .collect();
        assert_eq!(got, [("one", 1.0), ("two", 0.5), ("three", -1.0)]);
        assert_eq!(c.adapters.merge, Merge::RunTime);
        assert_eq!(load(base.clone())?.adapters, AdapterPlan::default());
        let err = |req: LoadRequest| load(req).err().unwrap_or_default();
        let scales = err(LoadRequest {
            lora_adapters: vec!["a".into()],
            lora_scales: vec![1.0, 2.0],
            ..base.clone()
        });
        assert!(scales.contains("LoraScales has 2 values for 1"), "{scales}");
        let lora_base = err(LoadRequest {
            lora_adapter: "a".into(),
            lora_base: "b".into(),
            ..base.clone()
        });
        assert!(lora_base.contains("LoraBase"), "{lora_base}");
        let fuse = err(LoadRequest {
            options: vec!["fuse:true".into()],
            ..base.clone()
        });
        assert!(fuse.contains("`fuse`"), "{fuse}");
        let nan = err(LoadRequest {
            lora_adapter: "a".into(),
            lora_scale: f32::NAN,
            ..base
        });
        assert!(nan.contains("LoraScale"), "{nan}");
        Ok(())
    }

    /// `ship_model` needs a hostfile (option or environment) and no adapters.
    #[test]
    fn ship_model_needs_a_cluster_and_no_adapters() -> Result<(), String> {
        assert!(!load(&[], &[])?.shipping.ship_model);
        let hostfile = [("MLX_DISTRIBUTED_HOSTFILE", "/h.json")];
        assert!(load(&["ship_model:true"], &hostfile)?.shipping.ship_model);
        assert!(
            load(&["ship_model:true", "hostfile:/h.json"], &[])?
                .shipping
                .ship_model
        );
        let alone = load(&["ship_model:true"], &[]).err().unwrap_or_default();
        assert!(alone.contains("no cluster to ship to"), "{alone}");
        let bad = load(&["ship_model:maybe"], &hostfile)
            .err()
            .unwrap_or_default();
        assert!(bad.contains("option `ship_model`"), "{bad}");
        let req = LoadRequest {
            model: "m".into(),
            options: vec!["ship_model:true".into()],
            lora_adapter: "a".into(),
            ..Default::default()
        };
        let env = FakeEnv(hostfile.into_iter().collect());
        let adapters = LoadConfig::from_request(&req, &env)
            .err()
            .unwrap_or_default();
        assert!(
            adapters.contains("LoRA adapters are not shipped"),
            "{adapters}"
        );
        Ok(())
    }

    #[test]
    fn speculation_options_and_the_draft_model() -> Result<(), String> {
        let load = |options: &[&str], draft: &str| {
            let req = LoadRequest {
                model: "m".into(),
                options: options.iter().map(|o| o.to_string()).collect(),
                draft_model: draft.into(),
                ..Default::default()
            };
            LoadConfig::from_request(&req, &NoEnv)
        };
        let c = load(&["speculative:ngram", "num_draft_tokens:6"], "")?;
        assert_eq!((c.spec.drafting, c.spec.draft_tokens), (Drafting::Ngram, 6));
        let c = load(&[], " small ")?;
        assert_eq!(
            (c.spec.drafting, c.spec.draft_model.as_deref()),
            (Drafting::Model, Some("small"))
        );
        assert_eq!(load(&[], "")?.spec.drafting, Drafting::Off);
        let err = |options: &[&str], draft: &str| load(options, draft).err().unwrap_or_default();
        assert!(err(&["speculative:ngram"], "small").contains("DraftModel is set"));
        assert!(err(&["speculative:draft"], "").contains("needs ModelOptions.DraftModel"));
        assert!(err(&["speculative:eagle"], "").contains("option `speculative`"));
        assert!(err(&["num_draft_tokens:33"], "").contains("num_draft_tokens"));
        Ok(())
    }

    #[test]
    fn kv_cache_types_and_mlx_lm_options() -> Result<(), String> {
        let req = LoadRequest {
            model: "m".into(),
            cache_type_key: "q8_0".into(),
            cache_type_value: "f16".into(),
            options: vec!["kv_group_size:32".into(), "quantized_kv_start:100".into()],
            ..Default::default()
        };
        let f = LoadConfig::from_request(&req, &NoEnv)?.kv;
        assert_eq!(f.keys, KvEncoding::Affine { bits: 8 });
        assert_eq!(f.values, KvEncoding::Float(crate::cache::KvFloat::F16));
        assert_eq!((f.group_size, f.quantized_start), (32, 100));
        let f = load(&["kv_bits:4"], &[])?.kv;
        assert_eq!(
            (f.keys, f.values),
            (
                KvEncoding::Affine { bits: 4 },
                KvEncoding::Affine { bits: 4 }
            )
        );
        let bad_field = LoadRequest {
            cache_type_key: "q3_k".into(),
            ..req
        };
        let err = LoadConfig::from_request(&bad_field, &NoEnv).unwrap_err();
        assert!(
            err.contains("CacheTypeKey") && err.contains("q3_k"),
            "{err}"
        );
        for (option, named) in [
            ("kv_group_size:48", "kv_group_size"),
            ("kv_bits:7", "kv_bits"),
            ("cache_type_v:q2", "cache_type_v"),
        ] {
            let err = load(&[option], &[]).unwrap_err();
            assert!(err.contains(named), "{option}: {err}");
        }
        Ok(())
    }

    #[test]
    fn values_are_typed_like_localai() {
        let parsed = parse_options(&[
            "a:true".into(),
            "b: 12 ".into(),
            "c:1e3".into(),
            "d:x:y".into(),
            "noval".into(),
        ]);
        assert_eq!(
            parsed,
            vec![
                ("a".into(), OptionValue::Bool(true)),
                ("b".into(), OptionValue::Int(12)),
                ("c".into(), OptionValue::Float(1000.0)),
                ("d".into(), OptionValue::Str("x:y".into())),
            ]
        );
    }

    #[test]
    fn p2p_without_a_hostfile_from_options_or_localai_variables() -> Result<(), String> {
        assert_eq!(load(&[], &[])?.p2p, None);
        let c = load(&["p2p_ranks:3", "p2p_wait:5"], &[("TOKEN", "the-token")])?;
        let p = c.p2p.ok_or("p2p")?;
        assert_eq!(
            (p.token.0.as_str(), p.ranks, p.wait_secs),
            ("the-token", Some(3), 5)
        );
        assert_eq!(c.cluster.token, Some(Token("the-token".into())));
        let c = load(
            &["p2p_token:opt-token"],
            &[("LOCALAI_P2P_NETWORK_ID", "n1")],
        )?;
        let p = c.p2p.ok_or("p2p")?;
        assert_eq!(
            (p.token.0.as_str(), p.network_id.as_str(), p.ranks),
            ("opt-token", "n1", None)
        );
        // A hostfile wins over an ambient token; P2P options beside one are an error.
        let c = load(&["hostfile:/h.json"], &[("TOKEN", "the-token")])?;
        assert_eq!(c.p2p, None);
        let err = |o: &[&str], e: &[(&'static str, &'static str)]| load(o, e).unwrap_err();
        assert!(err(&["hostfile:/h.json", "p2p_ranks:2"], &[]).contains("no hostfile"));
        assert!(err(&["p2p_ranks:2"], &[]).contains("need a token"));
        assert!(err(&["p2p_ranks:1"], &[("TOKEN", "t")]).contains("p2p_ranks"));
        Ok(())
    }

    #[test]
    fn known_options_and_env_fallbacks() -> Result<(), String> {
        let c = load(
            &[
                "temp:0.7",
                "top_k:40",
                "max_tokens:99",
                "parallelism:tensor",
                "unknown:1",
            ],
            &[
                ("MLX_DISTRIBUTED_HOSTFILE", "/h.json"),
                ("MLX_DISTRIBUTED_BACKEND", "jaccl"),
            ],
        )?;
        assert_eq!(c.sampling.temperature, Some(0.7));
        assert_eq!(c.sampling.top_k, Some(40));
        assert_eq!(c.sampling.max_tokens, Some(99));
        assert!(!c.allow_paths_outside_model_path);
        assert!(
            load(&["allow_paths_outside_model_path:true"], &[])?.allow_paths_outside_model_path
        );
        assert_eq!(c.cluster.hostfile, Some(PathBuf::from("/h.json")));
        assert_eq!(c.cluster.transport, Transport::Jaccl);
        assert_eq!(c.cluster.effective_parallelism(), Parallelism::Tensor);
        // A mixture of experts whose experts divide over the ranks runs expert-parallel by
        // default where the default would be tensor; an explicit choice stands.
        assert_eq!(c.cluster.parallelism_for(Some(128), 2), Parallelism::Tensor);
        let jaccl = load(&[], &[("MLX_DISTRIBUTED_BACKEND", "jaccl")])?;
        assert_eq!(
            jaccl.cluster.parallelism_for(Some(128), 2),
            Parallelism::Expert
        );
        assert_eq!(
            jaccl.cluster.parallelism_for(Some(128), 3),
            Parallelism::Tensor
        );
        assert_eq!(jaccl.cluster.parallelism_for(None, 2), Parallelism::Tensor);
        let ring = load(&[], &[])?;
        assert_eq!(
            ring.cluster.parallelism_for(Some(128), 2),
            Parallelism::Pipeline
        );
        let expert = load(&["parallelism:expert"], &[])?;
        assert_eq!(expert.cluster.parallelism_for(None, 2), Parallelism::Expert);
        let c = load(
            &["hostfile:/o.json", "distributed_backend:ring"],
            &[("MLX_DISTRIBUTED_HOSTFILE", "/h.json")],
        )?;
        assert_eq!(
            (c.cluster.hostfile, c.cluster.transport),
            (Some(PathBuf::from("/o.json")), Transport::Ring)
        );
        assert_eq!(
            load(&[], &[])?.cluster.effective_parallelism(),
            Parallelism::Pipeline
        );
        Ok(())
    }

    #[test]
    fn bad_values_are_named() {
        for (opt, needle) in [
            ("top_p:2", "top_p"),
            ("max_tokens:-1", "max_tokens"),
            ("distributed_backend:mpi", "distributed_backend"),
            ("parallelism:data", "parallelism"),
            ("seed:abc", "seed"),
            ("trust_remote_code:maybe", "trust_remote_code"),
            (
                "allow_paths_outside_model_path:yes",
                "allow_paths_outside_model_path",
            ),
        ] {
            let err = load(&[opt], &[]).unwrap_err();
            assert!(err.contains(needle), "{opt}: {err}");
        }
        let err = load(&[], &[("MLX_DISTRIBUTED_BACKEND", "nccl")]).unwrap_err();
        assert!(err.contains("MLX_DISTRIBUTED_BACKEND"), "{err}");
    }

    /// A small seeded generator (xorshift64*), so the property tests need no crate and
    /// replay the same cases on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }

        /// Text of up to `size` characters: ASCII, multibyte, separators and brackets.
        fn text(&mut self, size: usize) -> String {
            const PIECES: &[&str] = &[
                "a", "Z", "9", ":", " ", "é", "€", "𝄞", "[", "{", "\"", "_", "-", ".", "\n",
                "\u{0}",
            ];
            let len = self.below(size + 1);
            (0..len).map(|_| self.pick(PIECES)).collect()
        }

        /// A value: numbers at and past every bound, floats, booleans, or text.
        fn value(&mut self, size: usize) -> String {
            const VALUES: &[&str] = &[
                "0",
                "1",
                "-1",
                "1.5",
                "1e11",
                "NaN",
                "inf",
                "-inf",
                "true",
                "false",
                "8",
                "600",
                "601",
                "3600",
                "3601",
                "65535",
                "65536",
                "16777216",
                "16777217",
                "9223372036854775807",
                "-9223372036854775808",
                "99999999999999999999",
                "q4_0",
                "ring",
                "127.0.0.1:9090",
                "auto",
                "1_000",
            ];
            match self.below(3) {
                0 => self.text(size),
                _ => self.pick(VALUES).to_string(),
            }
        }
    }

    /// Every key the parser knows (from the table), and some it does not.
    fn keys() -> Vec<&'static str> {
        let mut keys = option_names();
        keys.extend(["gpu_layers", "temprature", ""]);
        keys
    }

    /// Each row of the table reaches a setter that takes it: a value it refuses names the
    /// option; none answers "no setter".
    #[test]
    fn every_option_in_the_table_has_a_setter() {
        for spec in OPTIONS {
            for value in ["1", "x"] {
                let option = format!("{}:{value}", spec.name);
                if let Err(e) = load(&[option.as_str()], &[("TOKEN", "t")]) {
                    assert!(
                        !e.contains("no setter") && e.contains(spec.name),
                        "{option}: {e}"
                    );
                }
            }
        }
    }

    /// Checks one parse: no panic, an error under 1 KiB.
    fn parse_checked(req: &LoadRequest) -> Result<LoadConfig, String> {
        let env = FakeEnv([("TOKEN", "t")].into_iter().collect());
        let run = std::panic::catch_unwind(|| LoadConfig::from_request(req, &env));
        let result = run
            .map_err(|_| format!("panicked on {:?}", crate::error::quote(&format!("{req:?}"))))
            .unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = &result {
            assert!(
                e.len() < 1024,
                "{} bytes: {}",
                e.len(),
                crate::error::quote(e)
            );
        }
        result
    }

    /// One option at a time, its value of any size (up to 256 KiB): a refused known option's
    /// error names it; an unknown one is ignored.
    #[test]
    fn one_option_of_any_value_never_panics_and_names_itself() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let keys = keys();
        for case in 0..3000 {
            let size = [0, 8, 300, 5000, 1 << 18][case % 5];
            let key = rng.pick(&keys);
            let option = format!("{key}:{}", rng.value(size));
            let req = LoadRequest {
                model: "m".into(),
                options: vec![option.clone()],
                ..Default::default()
            };
            if let Err(e) = parse_checked(&req) {
                assert!(
                    !key.is_empty() && e.contains(key),
                    "{}: {e}",
                    crate::error::quote(&option)
                );
            }
        }
    }

    /// Many options (up to 2,000), keys and values random with depth (`a:b:c:...`) and size as
    /// the axes, and the request's own text fields long: never a panic, errors short.
    #[test]
    fn many_options_deep_and_long_never_panic() {
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        let keys = keys();
        for case in 0..300 {
            let count = [1, 10, 100, 2000][case % 4];
            let depth = rng.below(50);
            let size = [4, 100, 2000][case % 3];
            let options = (0..count)
                .map(|_| {
                    let key = match rng.below(3) {
                        0 => rng.text(size),
                        _ => rng.pick(&keys).to_string(),
                    };
                    let nested: Vec<String> = (0..depth).map(|_| rng.value(8)).collect();
                    format!("{key}:{}{}", rng.value(size), nested.join(":"))
                })
                .collect();
            let req = LoadRequest {
                model: rng.text(size * 10).trim().to_string() + "m",
                options,
                cache_type_key: rng.text(size),
                lora_adapters: vec![rng.text(size)],
                draft_model: rng.text(size),
                ..Default::default()
            };
            let _ = parse_checked(&req);
        }
    }

    /// The bounds the issue named: fractional, huge and out-of-range values are refused with
    /// the option, the range and the value; kv_bits beside a cache type is a conflict.
    #[test]
    fn ranges_are_named_with_the_value() {
        let err = |o: &str| load(&[o], &[("TOKEN", "t")]).err().unwrap_or_default();
        let e = err("p2p_wait:1.5");
        assert!(
            e.contains("`p2p_wait`") && e.contains("[1, 600]") && e.contains("got 1.5"),
            "{e}"
        );
        let e = err("quantized_kv_start:1e11");
        assert!(
            e.contains("`quantized_kv_start`")
                && e.contains("[0, 16777216]")
                && e.contains("100000000000"),
            "{e}"
        );
        for (o, range) in [
            ("join_timeout:3601", "[1, 3600]"),
            ("p2p_wait:601", "[1, 600]"),
            ("queue_timeout:0", "[1, 3600]"),
            ("max_batch:100000", "[1, 1024]"),
            ("control_port:70000", "[1, 65535]"),
            ("max_tokens:99999999999", "[1, 16777216]"),
        ] {
            let e = err(o);
            let key = o.split(':').next().unwrap_or_default();
            assert!(e.contains(key) && e.contains(range), "{o}: {e}");
        }
        assert!(load(&["join_timeout:3600", "queue_timeout:3600"], &[]).is_ok());
        for (options, cache_key) in [
            (&["cache_type_k:q4_0", "kv_bits:8"][..], ""),
            (&["kv_bits:8"][..], "q8_0"),
        ] {
            let req = LoadRequest {
                model: "m".into(),
                options: options.iter().map(|s| s.to_string()).collect(),
                cache_type_key: cache_key.into(),
                ..Default::default()
            };
            let e = LoadConfig::from_request(&req, &NoEnv)
                .err()
                .unwrap_or_default();
            assert!(
                e.contains("kv_bits") && (e.contains("cache_type_k") || e.contains("CacheTypeKey")),
                "{e}"
            );
        }
    }
}
