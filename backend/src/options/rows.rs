//! The rows of the option table, one per LoadModel option, in the order docs/options.md
//! lists them.

use super::bounds;
use super::table::{Group, Kind, OptionSpec, Read};
use crate::speculative::MAX_DRAFT_TOKENS;

/// A plain sampling override: a number, per request.
const fn sampling(name: &'static str, lo: f64, hi: f64, want: &'static str) -> OptionSpec {
    OptionSpec {
        name,
        aliases: &[],
        group: Group::Sampling,
        kind: Kind::Number {
            lo,
            hi,
            above_lo: false,
            want,
        },
        default: "the request's",
        read: Read::PerRequest,
        env: &[],
        field: "",
        yaml: "",
        doc: "overrides the request's value",
    }
}

/// An option read once at load, with no alias, variable or field: the common case.
const fn load(
    name: &'static str,
    group: Group,
    kind: Kind,
    default: &'static str,
    doc: &'static str,
) -> OptionSpec {
    OptionSpec {
        name,
        aliases: &[],
        group,
        kind,
        default,
        read: Read::Load,
        env: &[],
        field: "",
        yaml: "",
        doc,
    }
}

/// An integer option's kind.
const fn int(range: (usize, usize), unit: &'static str) -> Kind {
    Kind::Int { range, unit }
}

const TOKENS: (usize, usize) = (1, bounds::TOKENS);

/// Every LoadModel option, in the order docs/options.md lists them.
pub static OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        kind: int(TOKENS, ""),
        default: "none: 200 (Predict), 512 (PredictStream)",
        read: Read::PerRequest,
        doc: "default for requests whose `Tokens` is 0 (a request's own value always wins)",
        ..load("max_tokens", Group::Sampling, Kind::Bool, "", "")
    },
    OptionSpec {
        aliases: &["temp"],
        doc: "overrides the request's value, as in LocalAI's mlx backend",
        ..sampling("temperature", 0.0, 100.0, "a number >= 0")
    },
    sampling("top_p", 0.0, 1.0, "a number in [0, 1]"),
    OptionSpec {
        kind: int(bounds::TOP_K, ""),
        ..sampling("top_k", 0.0, 0.0, "")
    },
    sampling("min_p", 0.0, 1.0, "a number in [0, 1]"),
    OptionSpec {
        kind: Kind::Other("integer"),
        ..sampling("seed", 0.0, 0.0, "")
    },
    OptionSpec {
        kind: Kind::Number {
            lo: 0.0,
            hi: 100.0,
            above_lo: true,
            want: "a number > 0",
        },
        ..sampling("repetition_penalty", 0.0, 0.0, "")
    },
    sampling("presence_penalty", -100.0, 100.0, "a number"),
    sampling("frequency_penalty", -100.0, 100.0, "a number"),
    load(
        "max_kv_size",
        Group::Limits,
        int(TOKENS, ""),
        "the context size",
        "caps the context (prompt + generation)",
    ),
    load(
        "max_batch",
        Group::Limits,
        int(bounds::MAX_BATCH, ""),
        "8",
        "requests decoded together, as rows of one forward pass",
    ),
    load(
        "max_queue",
        Group::Limits,
        int(bounds::MAX_QUEUE, ""),
        "64",
        "requests that may wait for a row; more get RESOURCE_EXHAUSTED at once",
    ),
    load(
        "queue_timeout",
        Group::Limits,
        int(bounds::QUEUE_TIMEOUT_SECS, "seconds"),
        "600",
        "how long a request may wait for a row before it fails with RESOURCE_EXHAUSTED",
    ),
    load(
        "max_cache_entries",
        Group::Limits,
        int(bounds::MAX_CACHE_ENTRIES, ""),
        "10",
        "prefix-cache entries (as LocalAI's mlx backend; 0 turns the cache off)",
    ),
    load(
        "kv_memory_mb",
        Group::Limits,
        int(bounds::KV_MEMORY_MB, "MiB"),
        "half the memory free after loading",
        "KV memory the running requests and the prefix cache may hold together. Cached \
         prefixes are evicted first; a request that does not fit waits for a row to finish; \
         one that could never fit gets RESOURCE_EXHAUSTED naming this option",
    ),
    load(
        "prefill_step_size",
        Group::Limits,
        int(TOKENS, ""),
        "2048",
        "prompt tokens per forward pass",
    ),
    OptionSpec {
        field: "CacheTypeKey",
        yaml: "cache_type_k",
        ..load(
            "cache_type_k",
            Group::Kv,
            Kind::Other("`f32`, `f16`, `bf16`, `q8_0`, `q5_0`, `q5_1`, `q4_0`, `q4_1`"),
            "the model's dtype",
            "how the KV cache stores keys: cast on write and read back in the model's dtype, \
             or MLX's affine quantization at 8, 5 or 4 bits (a scale and a bias per group, so \
             `_0` and `_1` are the same format), read through `quantized_matmul` as mlx-lm's \
             `QuantizedKVCache` is. Any other name fails LoadModel naming it. A q8_0 cache of \
             an f32 model takes 0.28x the memory (`kv_memory_mb` counts it at that size)",
        )
    },
    OptionSpec {
        field: "CacheTypeValue",
        yaml: "cache_type_v",
        ..load(
            "cache_type_v",
            Group::Kv,
            Kind::Other("as `cache_type_k`"),
            "the model's dtype",
            "how the KV cache stores values",
        )
    },
    load(
        "kv_bits",
        Group::Kv,
        Kind::Other("2, 3, 4, 5, 6 or 8"),
        "none",
        "mlx-lm's name: quantizes both sides; with a `cache_type_*` option or field it is \
         refused as a conflict. DeepSeek and Kimi K2 (latent attention) refuse a quantized \
         cache, as mlx-lm's `deepseek_v3` cannot read one",
    ),
    load(
        "kv_group_size",
        Group::Kv,
        Kind::Other("32, 64 or 128, a divisor of the head dimension"),
        "64",
        "elements per scale of a quantized cache",
    ),
    load(
        "quantized_kv_start",
        Group::Kv,
        int((0, bounds::TOKENS), "positions"),
        "0",
        "keeps a sequence's cache in full precision until this many positions are cached (0: \
         quantized from the first forward pass, so a prefix-cache hit reads exactly what a \
         fresh run would)",
    ),
    load(
        "speculative",
        Group::Speculation,
        Kind::Other("`ngram`, `draft`, `off`"),
        "`draft` when `ModelOptions.DraftModel` is set, else `off`",
        "speculative decoding on rank 0, over any cluster: `ngram` proposes the tokens that \
         followed the latest earlier occurrence of the output's last 3 or 2 tokens in the \
         prompt or output (prompt lookup); `draft` proposes a draft model's greedy tokens \
         (`DraftModel`, the YAML's `draft_model`). One forward pass on every rank verifies a \
         step's proposals; greedy output is plain decoding's, token for token, and seeded \
         sampling takes a proposal with the model's own probability, so a seed reproduces. A \
         `DraftModel` whose tokenizer gives other ids is refused, naming the first \
         difference; `ngram` with a `DraftModel` is refused as contradictory. Rows with a \
         `Grammar` are not speculated",
    ),
    OptionSpec {
        read: Read::PerRequest,
        ..load(
            "num_draft_tokens",
            Group::Speculation,
            int((1, MAX_DRAFT_TOKENS), ""),
            "4",
            "the most proposals per step; a request's `NDraft` overrides it, and `NDraft` on \
             a model without `speculative` is INVALID_ARGUMENT. A row starts at the most and \
             follows Hugging Face's \"heuristic\" schedule: two more after a step that took \
             all its proposals, one fewer (down to 1) after one that refused one",
        )
    },
    load(
        "fuse",
        Group::Adapters,
        Kind::Bool,
        "`true`",
        "LoRA adapters (`ModelOptions.LoraAdapter`/`LoraAdapters`): `true` merges each update \
         into dense weights at load, so a token costs what it does without; `false` adds it \
         at run time everywhere. A quantized model always takes its update at run time, as \
         mlx-lm does. Without an adapter the option is refused",
    ),
    load(
        "dequantize",
        Group::Model,
        Kind::Bool,
        "`false`",
        "`false`: keep quantized weights packed (CPU: our kernels, in `cpu_numerics`; Metal: \
         MLX's kernels); `true`: dequantize to f32 at load (5-8x the memory)",
    ),
    OptionSpec {
        env: &["MLX_DISTRIBUTED_CPU_NUMERICS"],
        ..load(
            "cpu_numerics",
            Group::Model,
            Kind::Other("`exact`, `int8`"),
            "`int8` (where weights stay packed on the CPU)",
            "how packed weights multiply on the CPU: `int8` makes each value of their products' \
             activations (decode and prefill alike, so no row depends on its batch) two int8 \
             digits (a unit per 32 values) for integer dot products, within a mean KLD of 3e-6 \
             nats of `exact` on SmolLM2 (layers whose format has no \
             integer kernel here stay exact; Status counts them); `exact` in f32, token for \
             token as mlx-lm on the f32 twin. Asking for `int8` with `dequantize:true` or on \
             Metal is refused",
        )
    },
    OptionSpec {
        env: &["MLX_DISTRIBUTED_HOSTFILE"],
        ..load(
            "hostfile",
            Group::Cluster,
            Kind::Other("a path"),
            "one node",
            "run over the ranks the hostfile lists",
        )
    },
    OptionSpec {
        env: &["MLX_DISTRIBUTED_BACKEND"],
        ..load(
            "distributed_backend",
            Group::Cluster,
            Kind::Other("`ring`, `jaccl`"),
            "`ring`",
            "the transport of MLX's collectives",
        )
    },
    load(
        "parallelism",
        Group::Cluster,
        Kind::Other("`pipeline`, `tensor`, `expert`"),
        "ring: pipeline; jaccl: tensor (expert for a mixture of experts whose experts divide \
         over the ranks)",
        "`expert` (mixtures of experts): attention and dense layers as tensor, each rank holds \
         1/N of the routed experts whole",
    ),
    load(
        "layer_split",
        Group::Cluster,
        Kind::Other("`\"12,18\"` (layers per rank) or `auto`"),
        "even (by each layer's bytes)",
        "pipeline: layers per rank, or `auto` in proportion to each rank's free memory",
    ),
    load(
        "join_timeout",
        Group::Cluster,
        int(bounds::JOIN_TIMEOUT_SECS, "seconds"),
        "30",
        "how long rank 0 waits for every worker to join",
    ),
    load(
        "ship_model",
        Group::Shipping,
        Kind::Bool,
        "`false`",
        "`true`: rank 0 sends each worker its share of the model (pipeline: its layers' \
         tensors; tensor and expert mode: its slice of every split tensor and the other \
         tensors whole; and the safetensors headers, config and tokenizer files) over a \
         connection authenticated like the control channel, sha256-checked per tensor; the \
         worker keeps it in `~/.cache/mlx-distributed/shipped/<fingerprint>/` \
         (`MLX_DISTRIBUTED_SHIP_CACHE` overrides) and loads from there. The next load sends \
         nothing; an interrupted transfer resumes where it stopped; a tensor that arrives \
         bad 3 times fails LoadModel naming it. Needs a hostfile; refuses LoRA adapters \
         (give every machine those)",
    ),
    OptionSpec {
        env: &["MLX_JACCL_COORDINATOR"],
        ..load(
            "coordinator",
            Group::Cluster,
            Kind::Other("`ip:port`"),
            "none",
            "JACCL: rank 0's coordinator",
        )
    },
    OptionSpec {
        env: &["MLX_DISTRIBUTED_CONTROL_PORT"],
        ..load(
            "control_port",
            Group::Cluster,
            int(bounds::PORT, ""),
            "rank 0's ring port + 1, or the JACCL coordinator's + 1",
            "rank 0's control port",
        )
    },
    load(
        "metrics_addr",
        Group::Metrics,
        Kind::Other("`ip:port`"),
        "off",
        "rank 0 serves live metrics and a status page on this address; a taken address fails \
         LoadModel naming it",
    ),
    OptionSpec {
        env: &["LOCALAI_P2P_TOKEN", "TOKEN"],
        ..load(
            "p2p_token",
            Group::P2p,
            Kind::Other("a string"),
            "none",
            "P2P without a hostfile: the token rank 0 looks for workers with",
        )
    },
    OptionSpec {
        env: &["LOCALAI_P2P_NETWORK_ID", "P2P_NETWORK_ID"],
        ..load(
            "p2p_network_id",
            Group::P2p,
            Kind::Other("a string"),
            "none",
            "P2P: the network id workers must share",
        )
    },
    OptionSpec {
        env: &["MLX_P2P_RANKS"],
        ..load(
            "p2p_ranks",
            Group::P2p,
            int(bounds::P2P_RANKS, "ranks"),
            "none: whoever answers",
            "P2P: wait for exactly these ranks (rank 0 counted); fewer within `p2p_wait` fails \
             the load with a message listing who was found",
        )
    },
    OptionSpec {
        env: &["MLX_P2P_WAIT"],
        ..load(
            "p2p_wait",
            Group::P2p,
            int(bounds::P2P_WAIT_SECS, "seconds"),
            "60 with `p2p_ranks`, else 10",
            "P2P: how long rank 0 browses for workers (at least one worker)",
        )
    },
    load(
        "allow_paths_outside_model_path",
        Group::Model,
        Kind::Bool,
        "`false`",
        "`true`: a relative `Model` may leave `ModelPath` through `..` or a symbolic link \
         (workers follow the same rule)",
    ),
    OptionSpec {
        field: "TrustRemoteCode",
        yaml: "trust_remote_code",
        ..load(
            "trust_remote_code",
            Group::Model,
            Kind::Bool,
            "`false`",
            "accepted for LocalAI compatibility",
        )
    },
];
