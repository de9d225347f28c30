//! LocalAI's model YAML, the part that concerns this backend, read with serde_yaml: the one
//! description of a distributed model, so that the host and every rank can read the same
//! file. Unknown keys are kept and ignored, as LocalAI's loader (`gopkg.in/yaml.v3`, not
//! strict) ignores them. [`ModelYaml::load_request`] is the one mapping to what LoadModel is
//! given, written against LocalAI's `grpcModelOpts` (core/backend/options.go): which
//! `ModelOptions` fields it sets, from which keys.

use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};

use crate::options::LoadRequest;

/// LocalAI's context size when the YAML gives none (`EffectiveContextSize`, 4096).
pub const DEFAULT_CONTEXT_SIZE: i32 = 4096;

/// A model YAML's fields this backend reads (`config.ModelConfig`'s keys).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ModelYaml {
    pub name: String,
    pub backend: String,
    pub parameters: Parameters,
    pub context_size: Option<i32>,
    /// `key:value` load options (`ModelOptions.Options`).
    pub options: Vec<String>,
    pub template: Template,
    pub function: Function,
    pub trust_remote_code: bool,
    pub cache_type_k: String,
    pub cache_type_v: String,
    pub draft_model: String,
    /// Proposals per step: LocalAI sends it with each request (`PredictOptions.NDraft`).
    pub n_draft: i32,
    pub lora_adapter: String,
    pub lora_scale: f32,
    pub lora_adapters: Vec<String>,
    pub lora_scales: Vec<f32>,
    pub lora_base: String,
    /// Read by LocalAI into `ModelOptions` (`MMap`, `F16Memory`, `Threads`); MLX maps
    /// safetensors itself, computes in the checkpoint's or the weight mode's dtype and sizes
    /// its own thread pool, so they change nothing here.
    pub mmap: Option<bool>,
    pub f16: Option<bool>,
    pub threads: Option<i32>,
    /// Every top-level key not above, as written (kept, ignored).
    #[serde(skip)]
    pub other: Mapping,
}

/// `parameters:` (LocalAI's `PredictionOptions`): the model, and request defaults LocalAI
/// sends with each request.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Parameters {
    pub model: String,
    pub temperature: Option<f64>,
    pub top_k: Option<i32>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    pub max_tokens: Option<i32>,
    pub seed: Option<i64>,
    pub repeat_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
}

/// `template:`: whether prompts go through the tokenizer's chat template.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Template {
    pub use_tokenizer_template: bool,
}

/// `function:`: the grammar's lazy triggers (`function.grammar.triggers[].word`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Function {
    pub grammar: FunctionGrammar,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct FunctionGrammar {
    pub triggers: Vec<Trigger>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Trigger {
    pub word: String,
}

/// The top-level keys [`ModelYaml`] types; the rest go to `other`. The option table's `yaml`
/// keys are among them (a test checks each sets its option).
const TYPED: &[&str] = &[
    "name",
    "backend",
    "parameters",
    "context_size",
    "options",
    "template",
    "function",
    "trust_remote_code",
    "cache_type_k",
    "cache_type_v",
    "draft_model",
    "n_draft",
    "lora_adapter",
    "lora_scale",
    "lora_adapters",
    "lora_scales",
    "lora_base",
    "mmap",
    "f16",
    "threads",
];

impl ModelYaml {
    /// Parses a model YAML; an error names the field and its line (serde_yaml's location),
    /// and an option that is not `key:value` is an error naming it and its line.
    pub fn parse(text: &str) -> Result<ModelYaml, String> {
        check_shape(text)?;
        let mut yaml: ModelYaml = serde_yaml::from_str(text).map_err(|e| explain(e, text))?;
        if let Value::Mapping(all) = serde_yaml::from_str(text).map_err(|e| explain(e, text))? {
            yaml.other = all
                .into_iter()
                .filter(|(k, _)| !k.as_str().is_some_and(|k| TYPED.contains(&k)))
                .collect();
        }
        for option in &yaml.options {
            if !option.contains(':') {
                let at = line_of(text, option).map_or(String::new(), |l| format!(" at line {l}"));
                return Err(format!(
                    "options: `{}`{at} is not `key:value` (LocalAI passes each entry as is)",
                    crate::error::quote(option)
                ));
            }
        }
        Ok(yaml)
    }

    /// What LoadModel is given for this YAML, as LocalAI's `grpcModelOpts` fills
    /// `ModelOptions` (with `model_path`, the host's models folder): the model from
    /// `parameters.model`; `context_size` or 4096; `options`; `trust_remote_code`; the
    /// grammar triggers' words; `cache_type_k`/`_v`; `draft_model` joined to the models
    /// folder; the LoRA fields as they are.
    pub fn load_request(&self, model_path: &str) -> LoadRequest {
        LoadRequest {
            model: self.parameters.model.clone(),
            model_path: model_path.to_string(),
            options: self.options.clone(),
            context_size: self
                .context_size
                .filter(|&n| n > 0)
                .unwrap_or(DEFAULT_CONTEXT_SIZE),
            trust_remote_code: self.trust_remote_code,
            grammar_triggers: self
                .function
                .grammar
                .triggers
                .iter()
                .map(|t| t.word.clone())
                .collect(),
            cache_type_key: self.cache_type_k.clone(),
            cache_type_value: self.cache_type_v.clone(),
            draft_model: match self.draft_model.is_empty() {
                true => String::new(),
                false => join(model_path, &self.draft_model),
            },
            lora_adapter: self.lora_adapter.clone(),
            lora_scale: self.lora_scale,
            lora_adapters: self.lora_adapters.clone(),
            lora_scales: self.lora_scales.clone(),
            lora_base: self.lora_base.clone(),
        }
    }
}

impl ModelYaml {
    /// The keys set here that LocalAI sends with each request, not in `ModelOptions`: the
    /// `parameters` sampling defaults, `n_draft` (`PredictOptions.NDraft`) and
    /// `template.use_tokenizer_template`. A host applies them per request; without one
    /// (`worker serve`) each request carries its own, so a caller names them as unapplied.
    pub fn request_time_keys(&self) -> Vec<&'static str> {
        let p = &self.parameters;
        let set = [
            ("parameters.temperature", p.temperature.is_some()),
            ("parameters.top_k", p.top_k.is_some()),
            ("parameters.top_p", p.top_p.is_some()),
            ("parameters.min_p", p.min_p.is_some()),
            ("parameters.max_tokens", p.max_tokens.is_some()),
            ("parameters.seed", p.seed.is_some()),
            ("parameters.repeat_penalty", p.repeat_penalty.is_some()),
            (
                "parameters.frequency_penalty",
                p.frequency_penalty.is_some(),
            ),
            ("parameters.presence_penalty", p.presence_penalty.is_some()),
            ("n_draft", self.n_draft != 0),
            (
                "template.use_tokenizer_template",
                self.template.use_tokenizer_template,
            ),
        ];
        set.into_iter()
            .filter(|(_, on)| *on)
            .map(|(k, _)| k)
            .collect()
    }
}

/// The largest model YAML read: a model's description is a few KiB, and the parser's time and
/// memory grow with the text.
pub const MAX_YAML_BYTES: usize = 1 << 20;

/// The deepest nesting read (flow `[`/`{` and block indentation together): serde_yaml's
/// parser takes quadratic time in the flow depth (100k levels took over 30 s).
pub const MAX_YAML_DEPTH: usize = 64;

/// Refuses, before serde_yaml reads it, a text over [`MAX_YAML_BYTES`] or nested deeper than
/// [`MAX_YAML_DEPTH`] (naming the limit and the line), with one cheap pass over the text.
fn check_shape(text: &str) -> Result<(), String> {
    if text.len() > MAX_YAML_BYTES {
        return Err(format!(
            "the model YAML is {} bytes, over the limit of {MAX_YAML_BYTES}",
            text.len()
        ));
    }
    let mut depth = Depth::default();
    for (i, line) in text.lines().enumerate() {
        if depth.line(line) > MAX_YAML_DEPTH {
            return Err(format!(
                "the model YAML nests deeper than {MAX_YAML_DEPTH} levels at line {}",
                i + 1
            ));
        }
    }
    Ok(())
}

/// The nesting a scan has seen: block indentations open, flow brackets open, and whether it
/// is inside a quoted scalar (which may span lines).
#[derive(Default)]
struct Depth {
    indents: Vec<usize>,
    flow: usize,
    quote: Option<char>,
}

impl Depth {
    /// Takes one line; returns the deepest nesting on it.
    fn line(&mut self, line: &str) -> usize {
        let body = line.trim_start_matches(' ');
        if self.quote.is_none() && self.flow == 0 && !body.is_empty() && !body.starts_with('#') {
            let indent = line.len() - body.len();
            while self.indents.last().is_some_and(|&top| top >= indent) {
                self.indents.pop();
            }
            self.indents.push(indent);
        }
        let mut deepest = self.indents.len() + self.flow;
        let mut prev = ' ';
        for c in body.chars() {
            match (self.quote, c) {
                (Some(q), c) if c == q => self.quote = None,
                (Some(_), _) => {}
                (None, '#') if prev == ' ' => break,
                (None, '\'' | '"') if " [{,:-".contains(prev) => self.quote = Some(c),
                (None, '[' | '{') => self.flow += 1,
                (None, ']' | '}') => self.flow = self.flow.saturating_sub(1),
                (None, '-') if prev == ' ' => deepest += 1,
                _ => {}
            }
            deepest = deepest.max(self.indents.len() + self.flow);
            prev = c;
        }
        deepest
    }
}

/// `filepath.Join(dir, name)` as LocalAI joins the draft model to the models folder: one `/`
/// between (an absolute `name` too), `dir` empty giving `name` (Go also cleans `..` away).
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        return name.to_string();
    }
    format!(
        "{}/{}",
        dir.trim_end_matches('/'),
        name.trim_start_matches('/')
    )
}

/// serde_yaml's error (the field, line and column), and why where YAML's own words do not
/// say it: a line indented with a tab.
fn explain(e: serde_yaml::Error, text: &str) -> String {
    let line = e
        .location()
        .and_then(|at| text.lines().nth(at.line().checked_sub(1)?));
    let indent = |l: &str| l[..l.len() - l.trim_start().len()].contains('\t');
    match line.is_some_and(indent) {
        true => format!("{e} (the line is indented with a tab: YAML takes spaces only)"),
        false => e.to_string(),
    }
}

/// The first line (from 1) that holds `needle`.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPELINE: &str = "\
name: smol
backend: mlx-distributed
parameters:
  model: mlx-community/SmolLM2-135M-Instruct-8bit
  temperature: 0.7
template:
  use_tokenizer_template: true
context_size: 2048
draft_model: drafts/smol-4bit
function:
  grammar:
    triggers:
      - word: \"<tool_call>\"
gpu_layers: 99
options:
  - \"hostfile:/etc/ring-2.json\"  # a comment
  - distributed_backend:ring
";

    /// Each option the table says a YAML key also sets is typed here, and the key gives the
    /// load what the option gives.
    #[test]
    fn the_yaml_keys_of_the_option_table_set_their_options() -> Result<(), String> {
        use crate::options::{table::Kind, LoadConfig, NoEnv, OPTIONS};
        for spec in OPTIONS.iter().filter(|o| !o.yaml.is_empty()) {
            assert!(TYPED.contains(&spec.yaml), "{} is not read", spec.yaml);
            let value = match spec.kind {
                Kind::Bool => "true",
                _ => "q8_0",
            };
            let text = format!("parameters:\n  model: m\n{}: {value}\n", spec.yaml);
            let by_yaml = ModelYaml::parse(&text)?.load_request("");
            let by_option = LoadRequest {
                model: "m".into(),
                context_size: DEFAULT_CONTEXT_SIZE,
                options: vec![format!("{}:{value}", spec.name)],
                ..Default::default()
            };
            assert_eq!(
                LoadConfig::from_request(&by_yaml, &NoEnv)?,
                LoadConfig::from_request(&by_option, &NoEnv)?,
                "{}",
                spec.yaml
            );
        }
        Ok(())
    }

    #[test]
    fn a_model_yaml_maps_to_what_localai_sends() -> Result<(), String> {
        let yaml = ModelYaml::parse(PIPELINE)?;
        assert_eq!(yaml.parameters.temperature, Some(0.7));
        assert!(yaml.template.use_tokenizer_template);
        let req = yaml.load_request("/models");
        assert_eq!(req.model, "mlx-community/SmolLM2-135M-Instruct-8bit");
        assert_eq!(req.context_size, 2048);
        assert_eq!(
            req.options,
            ["hostfile:/etc/ring-2.json", "distributed_backend:ring"]
        );
        assert_eq!(req.draft_model, "/models/drafts/smol-4bit");
        assert_eq!(req.grammar_triggers, ["<tool_call>"]);
        assert_eq!(yaml.other.get("gpu_layers"), Some(&Value::from(99)), "kept");
        assert_eq!(yaml.other.len(), 1);
        let per_request = ["parameters.temperature", "template.use_tokenizer_template"];
        assert_eq!(yaml.request_time_keys(), per_request);
        let bare = ModelYaml::parse("parameters:\n  model: m\n")?.load_request("");
        assert_eq!((bare.context_size, bare.draft_model.as_str()), (4096, ""));
        Ok(())
    }

    /// What LocalAI's `grpcModelOpts` (core/backend/options.go, read at mudler/LocalAI
    /// 82c191a) puts in `ModelOptions` for this YAML, field by field, for the fields we read:
    /// `Model` is `parameters.model`; `ContextSize` is `EffectiveContextSize` (`context_size`
    /// when above 0, else 4096); `Options` is `options` as written; `TrustRemoteCode`;
    /// `GrammarTriggers` one `{Word}` per `function.grammar.triggers[].word`;
    /// `CacheTypeKey`/`CacheTypeValue` are `cache_type_k`/`cache_type_v`; `DraftModel` is
    /// `filepath.Join(modelPath, draft_model)` when set; `LoraAdapter`, `LoraScale`,
    /// `LoraAdapters`, `LoraScales` and `LoraBase` are the same-named keys.
    #[test]
    fn every_field_is_what_grpc_model_opts_sends() -> Result<(), String> {
        let text = "\
parameters:
  model: qwen3-moe
context_size: 0
trust_remote_code: true
cache_type_k: q8_0
cache_type_v: f16
draft_model: /drafts/small
lora_adapter: a
lora_scale: 0.5
lora_adapters: [b, c]
lora_scales: [1.0, 0.25]
lora_base: base
options: [\"parallelism:expert\"]
";
        let req = ModelYaml::parse(text)?.load_request("/models/");
        assert_eq!(req.model, "qwen3-moe");
        assert_eq!(req.model_path, "/models/");
        assert_eq!(req.context_size, 4096, "0 is LocalAI's default too");
        assert!(req.trust_remote_code);
        assert_eq!(
            (req.cache_type_key.as_str(), req.cache_type_value.as_str()),
            ("q8_0", "f16")
        );
        assert_eq!(
            req.draft_model, "/models/drafts/small",
            "joined, as filepath.Join does"
        );
        assert_eq!((req.lora_adapter.as_str(), req.lora_scale), ("a", 0.5));
        assert_eq!(req.lora_adapters, ["b", "c"]);
        assert_eq!(req.lora_scales, [1.0, 0.25]);
        assert_eq!(req.lora_base, "base");
        assert_eq!(req.options, ["parallelism:expert"]);
        assert!(req.grammar_triggers.is_empty());
        Ok(())
    }

    #[test]
    fn malformed_yaml_names_the_field_and_the_line() {
        let cases = [
            (
                "parameters:\n  model: m\n  temperature: hot\n",
                ["parameters.temperature", "line 3"],
            ),
            ("context_size: [1]\n", ["context_size", "line 1"]),
            ("options: \"hostfile:x\"\n", ["options", "line 1"]),
            (
                "name: a\noptions:\n  - hostfile:x\n  - max_batch 8\n",
                ["max_batch 8", "line 4"],
            ),
            ("parameters:\n\tmodel: m\n", ["tab", "line 2"]),
        ];
        for (text, wanted) in cases {
            let e = ModelYaml::parse(text).err().unwrap_or_default();
            for w in wanted {
                assert!(e.contains(w), "{text:?}: {e}");
            }
        }
    }

    /// Deep flow or block nesting and oversized texts are refused at once, naming the limit
    /// and the line; the fixture's own shapes pass.
    #[test]
    fn nesting_and_size_are_bounded() {
        let started = std::time::Instant::now();
        let flow = format!(
            "name: x\noptions: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = ModelYaml::parse(&flow).err().unwrap_or_default();
        assert!(e.contains("64 levels") && e.contains("line 2"), "{e}");
        let mut block = String::new();
        for i in 0..100 {
            block.push_str(&format!("{}k{i}:\n", " ".repeat(i)));
        }
        let e = ModelYaml::parse(&block).err().unwrap_or_default();
        assert!(e.contains("64 levels"), "{e}");
        let dashes = format!("options:\n{}x\n", "- ".repeat(200));
        assert!(ModelYaml::parse(&dashes).is_err());
        let big = format!("name: x\n# {}\n", "y".repeat(MAX_YAML_BYTES));
        let e = ModelYaml::parse(&big).err().unwrap_or_default();
        assert!(e.contains("over the limit"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let quoted = "name: \"a [ { b\"\noptions: ['it''s:x', \"k:[v\"]\n";
        assert!(
            ModelYaml::parse(quoted).is_ok(),
            "quoted brackets count for nothing"
        );
    }

    #[test]
    fn the_typed_keys_are_the_fields() -> Result<(), String> {
        let fields = serde_yaml::to_value(ModelYaml::default()).map_err(|e| e.to_string())?;
        let names: Vec<&str> = fields
            .as_mapping()
            .ok_or("a mapping")?
            .keys()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(names, TYPED);
        Ok(())
    }
}
