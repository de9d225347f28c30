//! The one list of LoadModel options: each option's name and aliases, values and range,
//! default, when it is read, environment fallbacks and doc. Parsing looks keys up here, so a
//! key is known exactly when it has a row; docs/options.md's table is rendered from it (a
//! test keeps the two equal) and the fuzz tests take their keys from it.

use super::{bounds, int_option, Bad, OptionValue};
use crate::speculative::MAX_DRAFT_TOKENS;

/// Which `LoadConfig` setter takes an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Sampling,
    /// Weights, paths, limits and the prefix cache.
    Engine,
    Kv,
    Speculation,
    Adapters,
    /// Where and how the model is spread, shipping included.
    Cluster,
    Metrics,
    P2p,
}

/// When an option's value is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Once, by LoadModel.
    Load,
    /// Kept at load and applied to each request, as a default or an override.
    PerRequest,
}

/// The values an option takes. Integers and numbers carry their range, so the error, the
/// docs and the check all read the same numbers (from `options::bounds`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Bool,
    /// A whole number in `range`, of `unit` ("" for a plain count).
    Int {
        range: (usize, usize),
        unit: &'static str,
    },
    /// A number in `[lo, hi]` (`(lo, hi]` when `above_lo`); `want` is what an error says.
    Number {
        lo: f64,
        hi: f64,
        above_lo: bool,
        want: &'static str,
    },
    /// Any other value, as the docs describe it; the setter checks it.
    Other(&'static str),
}

/// One LoadModel option.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    pub name: &'static str,
    /// Other keys for the same option (`temp` for `temperature`).
    pub aliases: &'static [&'static str],
    pub group: Group,
    pub kind: Kind,
    /// The default as the docs say it (the value itself is in `LoadConfig::defaults`).
    pub default: &'static str,
    pub read: Read,
    /// Variables read, in order, when the option is not given.
    pub env: &'static [&'static str],
    /// The `ModelOptions` field that sets it too ("" for none).
    pub field: &'static str,
    /// The model YAML's top-level key that sets it too ("" for none).
    pub yaml: &'static str,
    pub doc: &'static str,
}

impl OptionSpec {
    /// The value as an integer in the option's range, or the error naming range and value.
    pub(super) fn int(&self, value: &OptionValue, bad: &Bad) -> Result<usize, String> {
        match self.kind {
            Kind::Int { range, unit } => int_option(value, range, unit, bad),
            _ => Err(format!("option `{}` is not an integer option", self.name)),
        }
    }

    /// The value as a number in the option's range, or the error saying what it wants.
    pub(super) fn number(&self, value: &OptionValue, bad: &Bad) -> Result<f32, String> {
        let Kind::Number {
            lo,
            hi,
            above_lo,
            want,
        } = self.kind
        else {
            return Err(format!("option `{}` is not a number option", self.name));
        };
        value
            .as_f64()
            .filter(|x| x.is_finite() && *x >= lo && *x <= hi)
            .map(|x| x as f32)
            .filter(|x| !above_lo || f64::from(*x) > lo)
            .ok_or_else(|| bad(want))
    }
}

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
        Group::Engine,
        int(TOKENS, ""),
        "the context size",
        "caps the context (prompt + generation)",
    ),
    load(
        "max_batch",
        Group::Engine,
        int(bounds::MAX_BATCH, ""),
        "8",
        "requests decoded together, as rows of one forward pass",
    ),
    load(
        "max_queue",
        Group::Engine,
        int(bounds::MAX_QUEUE, ""),
        "64",
        "requests that may wait for a row; more get RESOURCE_EXHAUSTED at once",
    ),
    load(
        "queue_timeout",
        Group::Engine,
        int(bounds::QUEUE_TIMEOUT_SECS, "seconds"),
        "600",
        "how long a request may wait for a row before it fails with RESOURCE_EXHAUSTED",
    ),
    load(
        "max_cache_entries",
        Group::Engine,
        int(bounds::MAX_CACHE_ENTRIES, ""),
        "10",
        "prefix-cache entries (as LocalAI's mlx backend; 0 turns the cache off)",
    ),
    load(
        "kv_memory_mb",
        Group::Engine,
        int(bounds::KV_MEMORY_MB, "MiB"),
        "half the memory free after loading",
        "KV memory the running requests and the prefix cache may hold together. Cached \
         prefixes are evicted first; a request that does not fit waits for a row to finish; \
         one that could never fit gets RESOURCE_EXHAUSTED naming this option",
    ),
    load(
        "prefill_step_size",
        Group::Engine,
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
        Group::Engine,
        Kind::Bool,
        "`false`",
        "`false`: keep quantized weights packed (CPU: our kernels, f32 numerics; Metal: MLX's \
         kernels); `true`: dequantize to f32 at load (5-8x the memory)",
    ),
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
        Group::Cluster,
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
        Group::Engine,
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
            Group::Engine,
            Kind::Bool,
            "`false`",
            "accepted for LocalAI compatibility",
        )
    },
];

/// The option `key` names, by its name or an alias.
pub fn find(key: &str) -> Option<&'static OptionSpec> {
    OPTIONS
        .iter()
        .find(|o| o.name == key || o.aliases.contains(&key))
}

/// Every key an option is known by: names, then aliases.
pub fn option_names() -> Vec<&'static str> {
    let aliases = OPTIONS.iter().flat_map(|o| o.aliases.iter().copied());
    OPTIONS.iter().map(|o| o.name).chain(aliases).collect()
}

/// The known key closest to an unknown one, when it is a likely typo (an edit distance of at
/// most a third of its length); none for long keys, which are no typo of a short name.
pub fn nearest(key: &str) -> Option<&'static str> {
    if key.is_empty() || key.len() > 64 {
        return None;
    }
    let most = (key.chars().count() / 3).max(1);
    option_names()
        .into_iter()
        .map(|name| (edit_distance(key, name), name))
        .filter(|(d, _)| *d <= most)
        .min()
        .map(|(_, name)| name)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// docs/options.md's table, rendered from [`OPTIONS`].
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| option | type/range | default | read | environment | doc |\n\
         |---|---|---|---|---|---|\n",
    );
    for o in OPTIONS {
        let read = match o.read {
            Read::Load => "load",
            Read::PerRequest => "per request",
        };
        let env: Vec<String> = o.env.iter().map(|v| format!("`{v}`")).collect();
        let env = if env.is_empty() {
            "-".to_string()
        } else {
            env.join(", ")
        };
        out += &format!(
            "| {} | {} | {} | {read} | {env} | {} |\n",
            option_cell(o),
            kind_text(o.kind),
            o.default,
            o.doc
        );
    }
    out
}

/// The name, with its aliases and the `ModelOptions` field and YAML key that also set it.
fn option_cell(o: &OptionSpec) -> String {
    let mut also: Vec<String> = o.aliases.iter().map(|a| format!("`{a}`")).collect();
    if !o.field.is_empty() {
        also.push(format!("`ModelOptions.{}`", o.field));
    }
    if !o.yaml.is_empty() {
        also.push(format!("the YAML's `{}`", o.yaml));
    }
    match also.is_empty() {
        true => format!("`{}`", o.name),
        false => format!("`{}` (also {})", o.name, also.join(", ")),
    }
}

/// What values an option takes, as the docs say it.
fn kind_text(kind: Kind) -> String {
    match kind {
        Kind::Bool => "`true`, `false`".to_string(),
        Kind::Int {
            range: (lo, hi),
            unit: "",
        } => format!("integer in [{}, {}]", grouped(lo), grouped(hi)),
        Kind::Int {
            range: (lo, hi),
            unit,
        } => format!("whole {unit} in [{}, {}]", grouped(lo), grouped(hi)),
        Kind::Number {
            lo, hi, above_lo, ..
        } => match above_lo {
            true => format!("number in ({lo}, {hi}]"),
            false => format!("number in [{lo}, {hi}]"),
        },
        Kind::Other(text) => text.to_string(),
    }
}

/// `n` with thousands separators from five digits on (1024, 16,777,216).
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    if digits.len() < 5 {
        return digits;
    }
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names and aliases are unique, so a key finds one option.
    #[test]
    fn option_names_are_unique() {
        let names = option_names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }

    #[test]
    fn typos_find_the_nearest_name() {
        assert_eq!(nearest("temprature"), Some("temperature"));
        assert_eq!(nearest("max_token"), Some("max_tokens"));
        assert_eq!(nearest("gpu_layers"), None);
        assert_eq!(nearest(&"x".repeat(1000)), None);
        assert_eq!(grouped(16_777_216), "16,777,216");
        assert_eq!(grouped(1024), "1024");
    }

    /// docs/options.md's table is this table; `UPDATE_OPTIONS_DOC=1` rewrites the file.
    #[test]
    fn docs_options_md_matches_the_table() -> Result<(), String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/options.md");
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let lines: Vec<&str> = text.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.starts_with("| option |"))
            .ok_or("docs/options.md has no `| option |` table")?;
        let end = (start..lines.len())
            .find(|&i| !lines[i].starts_with('|'))
            .unwrap_or(lines.len());
        let found = lines[start..end].join("\n") + "\n";
        let expected = markdown_table();
        if found == expected {
            return Ok(());
        }
        if std::env::var("UPDATE_OPTIONS_DOC").is_ok_and(|v| v == "1") {
            let mut rewritten = lines[..start].join("\n") + "\n" + &expected;
            if end < lines.len() {
                rewritten += &(lines[end..].join("\n") + "\n");
            }
            return std::fs::write(path, rewritten).map_err(|e| format!("{path}: {e}"));
        }
        eprintln!("docs/options.md's table should be:\n{expected}");
        Err(
            "docs/options.md's table differs from backend/src/options/table.rs (the expected \
             table is printed above); rerun with UPDATE_OPTIONS_DOC=1 to rewrite it"
                .into(),
        )
    }
}
