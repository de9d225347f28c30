//! An adapter folder's files, as mlx-lm and PEFT write them, read into one low-rank update per
//! layer in mlx-lm's orientation (`a` is `[in, r]`, `b` is `[r, out]`), the scale in `b`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use mlx_rs::Array;
use serde_json::Value;

use crate::error::{read_json, Error, Result};

/// mlx-lm's weights file (`mlx_lm.lora` writes it beside `adapter_config.json`).
pub const MLX_FILE: &str = "adapters.safetensors";
/// PEFT's weights file (`save_pretrained` with safetensors, its default).
pub const PEFT_FILE: &str = "adapter_model.safetensors";

/// One layer's update `y += (x a) b`, `b` already scaled.
pub struct Update {
    pub a: Array,
    pub b: Array,
}

/// An adapter's updates by layer name (the checkpoint's prefix, such as
/// `model.layers.3.self_attn.q_proj`), each scaled by its own scale times `user_scale`.
pub fn read(dir: &Path, user_scale: f32) -> Result<HashMap<String, Update>> {
    let config: Value = read_json(&dir.join("adapter_config.json"))?;
    if dir.join(MLX_FILE).is_file() {
        return mlx_lm(dir, &config, user_scale);
    }
    if dir.join(PEFT_FILE).is_file() {
        return peft(dir, &config, user_scale);
    }
    let why = match dir.join("adapter_model.bin").is_file() {
        true => "adapter_model.bin is PyTorch's pickle format, which is not read: save it with \
                 safetensors (PEFT's default)"
            .to_string(),
        false => format!("neither {MLX_FILE} (mlx-lm) nor {PEFT_FILE} (PEFT)"),
    };
    Err(Error::Adapter(format!("{}: {why}", dir.display())))
}

/// The weights file's arrays, by key.
fn load(file: &Path) -> Result<HashMap<String, Array>> {
    Array::load_safetensors(file).map_err(|e| {
        let why = match e {
            mlx_rs::error::IoError::Exception(x) => crate::error::mlx_text(&x),
            other => other.to_string(),
        };
        Error::Adapter(format!("{}: {why}", file.display()))
    })
}

/// mlx-lm's format: `lora_parameters.scale` and keys `{layer}.lora_a` / `{layer}.lora_b`.
fn mlx_lm(dir: &Path, config: &Value, user_scale: f32) -> Result<HashMap<String, Update>> {
    let what = |msg: String| Error::Adapter(format!("{}: {msg}", dir.display()));
    match config["fine_tune_type"].as_str().unwrap_or("lora") {
        "lora" => {}
        "dora" => {
            return Err(what(
                "DoRA adapters (fine_tune_type `dora`) are not supported".into(),
            ))
        }
        "full" => {
            return Err(what(
                "fine_tune_type `full` holds whole weights, not an adapter: load it as the model"
                    .into(),
            ))
        }
        other => return Err(what(format!("unknown fine_tune_type `{other}`"))),
    }
    let params = &config["lora_parameters"];
    let scale = params["scale"].as_f64().ok_or_else(|| {
        what("adapter_config.json has no lora_parameters.scale (mlx-lm's LoRA scale)".into())
    })? as f32;
    let rank = params["rank"].as_u64().map(|r| r as i32);
    let mut pairs = Pairs::default();
    for (key, array) in load(&dir.join(MLX_FILE))? {
        let (layer, part) = match key.rsplit_once('.') {
            Some((layer, "lora_a")) => (layer, Part::A),
            Some((layer, "lora_b")) => (layer, Part::B),
            _ => {
                return Err(what(format!(
                    "`{}` is not a LoRA key (`...lora_a`, `...lora_b`)",
                    crate::error::quote(&key)
                )))
            }
        };
        pairs.put(layer, part, array);
    }
    pairs.finish(dir, rank, |_| Ok(scale * user_scale), Orientation::MlxLm)
}

/// PEFT's format: `lora_alpha / r` (or `/ sqrt(r)` with rsLoRA), keys
/// `base_model.model.{layer}.lora_A.weight` (`[r, in]`) and `lora_B.weight` (`[out, r]`).
fn peft(dir: &Path, config: &Value, user_scale: f32) -> Result<HashMap<String, Update>> {
    let what = |msg: String| Error::Adapter(format!("{}: {msg}", dir.display()));
    let peft = PeftConfig::parse(config).map_err(what)?;
    let mut pairs = Pairs::default();
    for (key, array) in load(&dir.join(PEFT_FILE))? {
        let name = key.strip_prefix("base_model.model.").unwrap_or(&key);
        let (layer, part) = if let Some(layer) = name.strip_suffix(".lora_A.weight") {
            (layer, Part::A)
        } else if let Some(layer) = name.strip_suffix(".lora_B.weight") {
            (layer, Part::B)
        } else {
            return Err(what(format!(
                "`{}` is not a LoRA key of a linear layer (`...lora_A.weight`, \
                 `...lora_B.weight`); embedding adapters, biases and saved modules are not supported",
                crate::error::quote(&key)
            )));
        };
        pairs.put(layer, part, array);
    }
    let scale = |(layer, r): (&str, i32)| peft.scale(layer, r).map(|s| s * user_scale);
    pairs.finish(dir, None, scale, Orientation::Peft)
}

/// Which factor a key holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    A,
    B,
}

/// How a format stores the factors: mlx-lm's `a` `[in, r]`, `b` `[r, out]`; PEFT's transposed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Orientation {
    MlxLm,
    Peft,
}

/// Factors gathered by layer until both are in.
#[derive(Default)]
struct Pairs(BTreeMap<String, (Option<Array>, Option<Array>)>);

impl Pairs {
    fn put(&mut self, layer: &str, part: Part, array: Array) {
        let slot = self.0.entry(layer.to_string()).or_default();
        match part {
            Part::A => slot.0 = Some(array),
            Part::B => slot.1 = Some(array),
        }
    }

    /// Every layer's update: both factors, 2-D, of one rank (`rank` when the config names it),
    /// `b` scaled by `scale(layer, r)`.
    fn finish(
        self,
        dir: &Path,
        rank: Option<i32>,
        scale: impl Fn((&str, i32)) -> Result<f32, String>,
        orientation: Orientation,
    ) -> Result<HashMap<String, Update>> {
        let what = |msg: String| Error::Adapter(format!("{}: {msg}", dir.display()));
        let mut updates = HashMap::new();
        for (layer, pair) in self.0 {
            let (Some(a), Some(b)) = pair else {
                return Err(what(format!(
                    "`{layer}` has only one of its two LoRA factors"
                )));
            };
            check_factor(&layer, "A", &a).map_err(&what)?;
            check_factor(&layer, "B", &b).map_err(&what)?;
            let (a, b) = match orientation {
                Orientation::MlxLm => (a, b),
                Orientation::Peft => (a.t(), b.t()),
            };
            let r = factor_rank(&layer, &a, &b).map_err(&what)?;
            if rank.is_some_and(|want| want != r) {
                return Err(what(format!(
                    "`{layer}` has rank {r}, and adapter_config.json says {}",
                    rank.unwrap_or_default()
                )));
            }
            let s = scale((&layer, r)).map_err(&what)?;
            if !s.is_finite() {
                return Err(what(format!(
                    "`{layer}`: the LoRA scale (the config's scale or alpha / r, times the \
                     requested scale) is {s}, not a finite number"
                )));
            }
            let b = b.multiply(Array::from_f32(s).as_dtype(b.dtype())?)?;
            updates.insert(layer, Update { a, b });
        }
        Ok(updates)
    }
}

/// A factor must be floating point with finite values: an integer tensor is no trained update,
/// and one NaN makes every logit NaN (the model then answers empty text).
fn check_factor(layer: &str, name: &str, x: &Array) -> Result<(), String> {
    if !x.dtype().is_float() {
        return Err(format!(
            "`{layer}`: LoRA factor {name} has dtype {:?}; factors must be floating point",
            x.dtype()
        ));
    }
    let finite = x
        .is_finite()
        .and_then(|f| f.all(None))
        .map_err(|e| crate::error::mlx_text(&e))?;
    match finite.try_item_exact::<bool>() {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "`{layer}`: LoRA factor {name} holds NaN or infinite values"
        )),
        Err(e) => Err(format!("`{layer}`: LoRA factor {name}: {e}")),
    }
}

/// The rank `r` of `a` (`[in, r]`) and `b` (`[r, out]`), which must agree.
fn factor_rank(layer: &str, a: &Array, b: &Array) -> Result<i32, String> {
    match (a.shape(), b.shape()) {
        ([_, r], [r2, _]) if r == r2 && *r > 0 => Ok(*r),
        (sa, sb) => Err(format!(
            "`{layer}`: LoRA factors of shapes {sa:?} and {sb:?} do not make a rank-r update"
        )),
    }
}

/// What of PEFT's `adapter_config.json` decides the scale, once refused what we cannot apply.
struct PeftConfig {
    alpha: f64,
    rank: Option<f64>,
    rs_lora: bool,
    rank_pattern: Vec<(regex::Regex, f64)>,
    alpha_pattern: Vec<(regex::Regex, f64)>,
}

impl PeftConfig {
    fn parse(config: &Value) -> Result<PeftConfig, String> {
        let kind = config["peft_type"].as_str().unwrap_or("LORA");
        if kind != "LORA" {
            return Err(format!("peft_type `{kind}` is not supported (only LORA)"));
        }
        let on = |key: &str| config[key].as_bool().unwrap_or(false);
        for (key, why) in [
            ("use_dora", "DoRA adapters are not supported"),
            (
                "fan_in_fan_out",
                "fan_in_fan_out (GPT-2's Conv1D layers) is not supported",
            ),
        ] {
            if on(key) {
                return Err(format!("{key} is true: {why}"));
            }
        }
        let saved = &config["modules_to_save"];
        if saved.as_array().is_some_and(|m| !m.is_empty()) {
            return Err(format!(
                "modules_to_save {saved} replaces whole modules, which is not supported"
            ));
        }
        Ok(PeftConfig {
            alpha: config["lora_alpha"]
                .as_f64()
                .ok_or("adapter_config.json has no lora_alpha")?,
            rank: config["r"].as_f64(),
            rs_lora: on("use_rslora"),
            rank_pattern: patterns(&config["rank_pattern"])?,
            alpha_pattern: patterns(&config["alpha_pattern"])?,
        })
    }

    /// `alpha / r` (rsLoRA: `alpha / sqrt(r)`), with the layer's own rank and alpha where a
    /// pattern names it; the config's rank must be the factors' own.
    fn scale(&self, layer: &str, r: i32) -> Result<f32, String> {
        let find = |patterns: &[(regex::Regex, f64)]| {
            patterns
                .iter()
                .find(|(re, _)| re.is_match(layer))
                .map(|p| p.1)
        };
        let rank = find(&self.rank_pattern).or(self.rank);
        if rank.is_some_and(|want| want != f64::from(r)) {
            return Err(format!(
                "`{layer}` has rank {r}, and adapter_config.json says {}",
                rank.unwrap_or_default()
            ));
        }
        let alpha = find(&self.alpha_pattern).unwrap_or(self.alpha);
        let r = f64::from(r);
        Ok((alpha / if self.rs_lora { r.sqrt() } else { r }) as f32)
    }
}

/// PEFT's `rank_pattern` / `alpha_pattern`: a key matches a layer whose name ends in it (after
/// a dot), as PEFT's `get_pattern_key` matches `(.*\.)?{key}$`.
fn patterns(value: &Value) -> Result<Vec<(regex::Regex, f64)>, String> {
    let Some(map) = value.as_object() else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|(key, v)| {
            let re = regex::Regex::new(&format!(r"^(.*\.)?(?:{key})$"))
                .map_err(|e| format!("pattern `{}`: {e}", crate::error::quote(key)))?;
            let n = v
                .as_f64()
                .ok_or_else(|| format!("pattern `{}` has no number", crate::error::quote(key)))?;
            Ok((re, n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn peft_scales_with_patterns_and_rs_lora() -> Result<(), String> {
        let config = json!({"r": 8, "lora_alpha": 16, "alpha_pattern": {"v_proj": 32},
                            "rank_pattern": {"layers.1.self_attn.q_proj": 4}});
        let c = PeftConfig::parse(&config)?;
        assert_eq!(c.scale("model.layers.0.self_attn.q_proj", 8)?, 2.0);
        assert_eq!(c.scale("model.layers.0.self_attn.v_proj", 8)?, 4.0);
        assert_eq!(c.scale("model.layers.1.self_attn.q_proj", 4)?, 4.0);
        let err = c.scale("model.layers.0.self_attn.k_proj", 4).unwrap_err();
        assert!(err.contains("rank 4") && err.contains("says 8"), "{err}");
        let rs = PeftConfig::parse(&json!({"r": 16, "lora_alpha": 8, "use_rslora": true}))?;
        assert_eq!(rs.scale("x", 16)?, 2.0);
        Ok(())
    }

    #[test]
    fn peft_refuses_what_it_cannot_apply() {
        for (config, named) in [
            (json!({"lora_alpha": 8, "use_dora": true}), "use_dora"),
            (
                json!({"lora_alpha": 8, "fan_in_fan_out": true}),
                "fan_in_fan_out",
            ),
            (
                json!({"lora_alpha": 8, "modules_to_save": ["lm_head"]}),
                "modules_to_save",
            ),
            (json!({"lora_alpha": 8, "peft_type": "IA3"}), "IA3"),
            (json!({"r": 8}), "lora_alpha"),
            (
                json!({"lora_alpha": 8, "rank_pattern": {"(": 4}}),
                "pattern",
            ),
        ] {
            let err = PeftConfig::parse(&config).err().unwrap_or_default();
            assert!(err.contains(named), "{config}: {err}");
        }
    }
}
