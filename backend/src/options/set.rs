//! The setters: each takes the options of one group of the table into its part of the
//! `LoadConfig`, and the cluster's variables fill what the options did not give.

use std::path::PathBuf;

use super::config::{LoadConfig, Parallelism};
use super::p2p::P2pGiven;
use super::parse::{bool_of, transport_of, Bad, OptionValue, UnknownOptions};
use super::table::{self, OptionSpec};
use super::{env, Env, LoadRequest};
use crate::cache::{KvEncoding, KvFormat, CACHE_TYPES};
use crate::distributed::Transport;
use crate::lora::Merge;
use crate::speculative::Drafting;
use crate::weights::{Numerics, WeightMode};

/// The cluster options a request gave; what it did not give falls back to the settings.
#[derive(Default)]
pub(super) struct ClusterGiven {
    hostfile: Option<String>,
    transport: Option<Transport>,
    control_port: Option<u16>,
}

impl LoadConfig {
    /// LocalAI's `CacheTypeKey`/`CacheTypeValue` fields, which options may override.
    pub(super) fn set_cache_type_fields(&mut self, req: &LoadRequest) -> Result<(), String> {
        let cache_type = |field: &str, name: &str| {
            KvEncoding::parse(name).map_err(|e| format!("ModelOptions.{field}: {e}"))
        };
        self.kv.keys = cache_type("CacheTypeKey", &req.cache_type_key)?;
        self.kv.values = cache_type("CacheTypeValue", &req.cache_type_value)?;
        Ok(())
    }

    /// Each option to its group's setter by the table; an unknown key is logged (with the
    /// nearest known name) and ignored, as LocalAI's backends ignore what they do not read.
    pub(super) fn set_options(
        &mut self,
        options: Vec<(String, OptionValue)>,
    ) -> Result<(ClusterGiven, P2pGiven), String> {
        let (mut given, mut p2p) = (ClusterGiven::default(), P2pGiven::default());
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
                Some(spec) => self.set(spec, &value, &bad, &mut given, &mut p2p)?,
                None => unknown.note(&key),
            }
        }
        unknown.log();
        Ok((given, p2p))
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
            Group::Model => self.set_model(spec, value, bad)?,
            Group::Limits => self.set_limits(spec, value, bad)?,
            Group::Kv => self.set_kv(spec, value, bad)?,
            Group::Speculation => self.set_speculation(spec, value, bad)?,
            Group::Adapters => self.set_adapters(spec, value, bad)?,
            Group::Cluster => self.set_cluster(spec, value, bad, given)?,
            Group::Shipping => self.set_shipping(spec, value, bad)?,
            Group::Metrics => self.set_metrics(spec, value, bad)?,
            Group::P2p => p2p.set(spec, value, bad)?,
        };
        match taken {
            true => Ok(()),
            false => Err(format!("option `{}` has no setter in its group", spec.name)),
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

    /// How the model is found and read; false when `key` is not about that.
    fn set_model(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        let flag = || bool_of(value).ok_or_else(|| bad("true or false"));
        match spec.name {
            "allow_paths_outside_model_path" => self.allow_paths_outside_model_path = flag()?,
            "trust_remote_code" => self.trust_remote_code = flag()?,
            "dequantize" => {
                self.weight_mode = match flag()? {
                    true => WeightMode::DequantizeF32,
                    false => WeightMode::default_for_device(),
                }
            }
            "cpu_numerics" => {
                let name = match value {
                    OptionValue::Str(v) => Numerics::parse(v),
                    _ => None,
                };
                self.cpu_numerics = Some(name.ok_or_else(|| bad("exact or int8"))?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Contexts, batches, queues and KV memory; false when `key` is none of them.
    fn set_limits(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        let l = &mut self.limits;
        match spec.name {
            "max_kv_size" => l.max_kv_size = Some(spec.int(value, bad)?),
            "max_cache_entries" => l.max_cache_entries = spec.int(value, bad)?,
            "kv_memory_mb" => l.kv_memory_mb = Some(spec.int(value, bad)?),
            "max_batch" => l.max_batch = spec.int(value, bad)?,
            "max_queue" => l.max_queue = spec.int(value, bad)?,
            "queue_timeout" => l.queue_timeout_secs = spec.int(value, bad)? as u64,
            "prefill_step_size" => l.prefill_step = spec.int(value, bad)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `ship_model`: rank 0 sends workers their share of the model.
    fn set_shipping(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        if spec.name != "ship_model" {
            return Ok(false);
        }
        self.shipping.ship_model = bool_of(value).ok_or_else(|| bad("true or false"))?;
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

    /// The hostfile, transport and control port the options did not give, from `env`.
    pub(super) fn set_cluster_fallbacks(
        &mut self,
        given: ClusterGiven,
        env: &dyn Env,
    ) -> Result<(), String> {
        self.cluster.control_port = match given.control_port {
            Some(p) => Some(p),
            None => match env::fallback_int(env, "control_port")? {
                Some(p) => Some(u16::try_from(p).map_err(|_| format!("port {p} is over 65535"))?),
                None => None,
            },
        };
        self.cluster.hostfile = given
            .hostfile
            .or_else(|| env::fallback(env, "hostfile").map(|(_, v)| v))
            .map(PathBuf::from);
        self.cluster.transport = match given.transport {
            Some(t) => t,
            None => match env::fallback(env, "distributed_backend") {
                Some((key, v)) => transport_of(&OptionValue::Str(v.clone()))
                    .ok_or_else(|| format!("{key}: expected ring or jaccl, got {v:?}"))?,
                None => Transport::Ring,
            },
        };
        Ok(())
    }
}
