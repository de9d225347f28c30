//! Mixture-of-experts checkpoints in every layout users have: experts stacked (mlx-community)
//! or one per key (Hugging Face), DeepSeek-V3 attention as `embed_q`/`unembed_out` or as the
//! older `kv_b_proj`; strict about what is missing or misshapen, clear about bad configs; and a
//! decode batch gives each row what it gets alone.

use std::collections::HashMap;

use backend::cache::{KvCache, KvFormat};
use backend::models::common::RankPart;
use backend::models::{self, LanguageModel, LocalModel, Row};
use backend::weights::{WeightMode, Weights};
use integration_tests::{fixture, TestResult};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{concatenate, split_equal};
use mlx_rs::Array;
use serde_json::Value;

type Tensors = HashMap<String, Array>;

fn checkpoint(folder: &str) -> TestResult<(Value, Tensors)> {
    let dir = fixture(folder)?;
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
    Ok((
        config,
        Array::load_safetensors(dir.join("model.safetensors"))?,
    ))
}

fn build(config: &Value, tensors: Tensors, mode: WeightMode) -> TestResult<LocalModel> {
    let transformer = models::build(
        config,
        Weights::from_arrays(tensors, config, mode)?,
        &RankPart::full(),
    )?;
    Ok(LocalModel::new(transformer, KvFormat::default())?)
}

fn build_error(config: &Value, tensors: Tensors) -> TestResult<String> {
    match build(config, tensors, WeightMode::AsStored) {
        Ok(_) => Err("loading should have failed".into()),
        Err(e) => Ok(e.to_string()),
    }
}

/// Last-position logits for a fixed prompt, as f32 values.
fn logits(model: &dyn LanguageModel) -> TestResult<Vec<f32>> {
    let ids: Vec<u32> = (0..12u32).map(|i| (i * 7919 + 5) % 49152).collect();
    let mut caches: Vec<KvCache> = (0..model.num_layers()).map(|_| KvCache::new()).collect();
    let out = model.forward(
        &Array::from_slice(&ids, &[1, ids.len() as i32]),
        &mut caches,
    )?;
    let last = out.index((0, -1, ..));
    last.eval()?;
    Ok(last.as_slice::<f32>().to_vec())
}

/// The stacked `switch_mlp.{part}.{kind}` tensors split into Hugging Face's `experts.{e}.*`.
fn unstack_experts(tensors: Tensors) -> TestResult<Tensors> {
    let mut out = HashMap::new();
    for (key, value) in tensors {
        let Some((layer, rest)) = key.split_once(".mlp.switch_mlp.") else {
            out.insert(key, value);
            continue;
        };
        let experts = value.shape()[0];
        for (e, part) in split_equal(&value, experts, 0)?.into_iter().enumerate() {
            out.insert(
                format!("{layer}.mlp.experts.{e}.{rest}"),
                part.squeeze_axes(&[0])?,
            );
        }
    }
    Ok(out)
}

#[test]
fn per_expert_keys_load_as_the_stacked_experts_do() -> TestResult {
    for (folder, mode) in [
        ("tiny-qwen3-moe", WeightMode::AsStored),
        ("tiny-deepseek-v2", WeightMode::AsStored),
        ("tiny-qwen3-moe-4bit", WeightMode::PackedF32),
        ("tiny-qwen3-moe-4bit", WeightMode::AsStored),
    ] {
        let (config, tensors) = checkpoint(folder)?;
        let stacked = logits(&build(&config, tensors.clone(), mode)?)?;
        let split = unstack_experts(tensors)?;
        assert!(split
            .keys()
            .any(|k| k.contains(".mlp.experts.7.down_proj.")));
        let per_expert = logits(&build(&config, split, mode)?)?;
        assert!(stacked == per_expert, "{folder} {mode:?}: logits differ");
    }
    Ok(())
}

/// MiniMax's Hugging Face layout: `block_sparse_moe.experts.{e}.{w1,w2,w3}` (gate, down, up),
/// and a multi-token-prediction layer after the last, load as mlx-lm's stacked experts do.
#[test]
fn minimax_w1_w2_w3_experts_load_as_the_stacked_experts_do() -> TestResult {
    let (config, tensors) = checkpoint("tiny-minimax")?;
    let stacked = logits(&build(&config, tensors.clone(), WeightMode::AsStored)?)?;
    let names = [("gate_proj", "w1"), ("down_proj", "w2"), ("up_proj", "w3")];
    let mut split = HashMap::new();
    for (key, value) in tensors {
        let Some((block, rest)) = key.split_once(".block_sparse_moe.switch_mlp.") else {
            split.insert(key, value);
            continue;
        };
        let (proj, kind) = rest.split_once('.').ok_or("no kind")?;
        let theirs = names.iter().find(|(o, _)| *o == proj).ok_or("no proj")?.1;
        let experts = value.shape()[0];
        for (e, part) in split_equal(&value, experts, 0)?.into_iter().enumerate() {
            let name = format!("{block}.block_sparse_moe.experts.{e}.{theirs}.{kind}");
            split.insert(name, part.squeeze_axes(&[0])?);
        }
    }
    assert!(split.contains_key("model.layers.1.block_sparse_moe.experts.7.w2.weight"));
    let layers = config["num_hidden_layers"]
        .as_i64()
        .ok_or("no layer count")?;
    let mtp = format!("model.layers.{layers}.input_layernorm.weight");
    split.insert(mtp, Array::from_slice(&[1.0f32; 4], &[4]));
    let per_expert = logits(&build(&config, split, WeightMode::AsStored)?)?;
    assert!(stacked == per_expert, "logits differ");
    Ok(())
}

/// Mistral 4's Hugging Face layout: each layer's experts fused as `mlp.experts.gate_up_proj`
/// ([experts, 2 * inter, hidden]) and `mlp.experts.down_proj`, without `.weight`.
#[test]
fn mistral4_fused_experts_load_as_the_stacked_experts_do() -> TestResult {
    let (config, tensors) = checkpoint("tiny-mistral4")?;
    let stacked = logits(&build(&config, tensors.clone(), WeightMode::AsStored)?)?;
    let mut fused = tensors.clone();
    for key in tensors.keys() {
        let Some(layer) = key.strip_suffix(".mlp.switch_mlp.gate_proj.weight") else {
            continue;
        };
        let mut take = |proj: &str| {
            fused
                .remove(&format!("{layer}.mlp.switch_mlp.{proj}.weight"))
                .ok_or("no proj")
        };
        let (gate, up, down) = (take("gate_proj")?, take("up_proj")?, take("down_proj")?);
        fused.insert(
            format!("{layer}.mlp.experts.gate_up_proj"),
            concatenate(&[gate, up], 1)?,
        );
        fused.insert(format!("{layer}.mlp.experts.down_proj"), down);
    }
    assert!(fused.contains_key("model.layers.2.mlp.experts.gate_up_proj"));
    let got = logits(&build(&config, fused, WeightMode::AsStored)?)?;
    assert!(stacked == got, "logits differ");
    Ok(())
}

#[test]
fn a_missing_expert_and_a_misshapen_stack_are_named() -> TestResult {
    let (config, tensors) = checkpoint("tiny-qwen3-moe")?;
    let mut split = unstack_experts(tensors.clone())?;
    split.remove("model.layers.2.mlp.experts.5.up_proj.weight");
    let err = build_error(&config, split)?;
    assert!(
        err.contains("missing key `model.layers.2.mlp.experts.5.up_proj.weight`"),
        "{err}"
    );

    let mut stacked = tensors;
    let key = "model.layers.0.mlp.switch_mlp.down_proj.weight";
    let short = stacked[key].index((..7, .., ..));
    stacked.insert(key.into(), short);
    let err = build_error(&config, stacked)?;
    assert!(err.contains(key) && err.contains("[8, 64, 32]"), "{err}");
    Ok(())
}

/// DeepSeek-V3 checkpoints carry a multi-token-prediction layer after the last, which
/// generation does not use: it is dropped, as mlx-lm's `sanitize` does. V2 has none, so
/// there such keys are unexpected.
#[test]
fn deepseek_v3_drops_its_prediction_layer_and_v2_refuses_it() -> TestResult {
    let (config, tensors) = checkpoint("tiny-deepseek-v3")?;
    let want = logits(&build(&config, tensors.clone(), WeightMode::AsStored)?)?;
    let layers = config["num_hidden_layers"]
        .as_i64()
        .ok_or("no layer count")?;
    let extra = format!("model.layers.{layers}.input_layernorm.weight");
    let mut with_mtp = tensors;
    with_mtp.insert(extra.clone(), Array::from_slice(&[1.0f32; 4], &[4]));
    let got = logits(&build(&config, with_mtp, WeightMode::AsStored)?)?;
    assert!(got == want, "the extra layer changed the logits");

    let (config, mut tensors) = checkpoint("tiny-deepseek-v2")?;
    let layers = config["num_hidden_layers"]
        .as_i64()
        .ok_or("no layer count")?;
    let extra = format!("model.layers.{layers}.input_layernorm.weight");
    tensors.insert(extra.clone(), Array::from_slice(&[1.0f32; 4], &[4]));
    let err = build_error(&config, tensors)?;
    assert!(err.contains("unexpected") && err.contains(&extra), "{err}");
    Ok(())
}

/// Checkpoints converted before mlx-lm cached the latent store `kv_b_proj` ([heads * (nope +
/// v), kv_lora_rank]); loading slices each head's key and value parts out of it.
#[test]
fn deepseek_v3_with_the_older_kv_b_proj_loads_the_same() -> TestResult {
    let (config, tensors) = checkpoint("tiny-deepseek-v3")?;
    let want = logits(&build(&config, tensors.clone(), WeightMode::AsStored)?)?;
    let mut old = HashMap::new();
    for (key, value) in &tensors {
        if let Some(prefix) = key.strip_suffix(".embed_q.weight") {
            let unembed = &tensors[&format!("{prefix}.unembed_out.weight")];
            let heads = value.shape()[0];
            let kv_b = concatenate(&[value.swap_axes(-1, -2)?, unembed.clone()], 1)?
                .reshape(&[-1, value.shape()[1]])?;
            assert_eq!(kv_b.shape()[0], heads * 64);
            old.insert(format!("{prefix}.kv_b_proj.weight"), kv_b);
        } else if !key.ends_with(".unembed_out.weight") {
            old.insert(key.clone(), value.clone());
        }
    }
    let got = logits(&build(&config, old, WeightMode::AsStored)?)?;
    // The same weights in the other orientation: the products may round differently.
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= 1e-5, "max |logit difference| = {worst}");
    Ok(())
}

#[test]
fn bad_moe_configs_are_named() -> TestResult {
    let cases: [(&str, &str, Value, &str); 4] = [
        (
            "tiny-qwen3-moe",
            "num_experts_per_tok",
            Value::from(9),
            "num_experts_per_tok is 9",
        ),
        (
            "tiny-deepseek-v2",
            "topk_method",
            Value::from("sampled"),
            "topk_method `sampled`",
        ),
        ("tiny-deepseek-v3", "n_group", Value::from(3), "n_group 3"),
        (
            "tiny-deepseek-v2",
            "qk_rope_head_dim",
            Value::from(15),
            "qk_rope_head_dim 15",
        ),
    ];
    for (folder, field, value, named) in cases {
        let (mut config, tensors) = checkpoint(folder)?;
        config[field] = value;
        let err = build_error(&config, tensors)?;
        assert!(err.contains(named), "{folder} {field}: {err}");
    }
    Ok(())
}

/// Rows of one decode batch, each at its own position, get the logits they get alone.
#[test]
fn a_decode_batch_gives_each_row_its_logits_alone() -> TestResult {
    for (folder, mode) in [
        ("tiny-qwen3-moe", WeightMode::AsStored),
        ("tiny-deepseek-v2", WeightMode::AsStored),
        ("tiny-deepseek-v3", WeightMode::AsStored),
        ("tiny-qwen3-moe-4bit", WeightMode::PackedF32),
        ("tiny-minimax", WeightMode::AsStored),
        ("tiny-mistral4", WeightMode::AsStored),
    ] {
        let (config, tensors) = checkpoint(folder)?;
        let model = build(&config, tensors, mode)?;
        batch_equals_alone(&model, folder)?;
    }
    Ok(())
}

fn batch_equals_alone(model: &dyn LanguageModel, folder: &str) -> TestResult {
    let layers = model.num_layers();
    let prompts: [&[u32]; 3] = [&[11, 22, 33], &[44, 55, 66, 77, 88], &[99]];
    let mut caches: Vec<Vec<KvCache>> = Vec::new();
    for p in prompts {
        let mut c: Vec<KvCache> = (0..layers).map(|_| KvCache::new()).collect();
        let mut row = Row {
            slot: 0,
            caches: &mut c,
        };
        model.prefill(
            &Array::from_slice(p, &[1, p.len() as i32]),
            &mut row,
            Vec::new(),
        )?;
        caches.push(c);
    }
    let next = [5u32, 6, 7];
    let alone: Vec<Vec<f32>> = caches
        .iter()
        .zip(next)
        .map(|(c, id)| {
            let mut own: Vec<KvCache> = c.iter().map(|k| k.prefix(k.offset() as usize)).collect();
            let out = model.forward(&Array::from_slice(&[id], &[1, 1]), &mut own)?;
            let row = out.index((0, 0, ..));
            row.eval()?;
            Ok(row.as_slice::<f32>().to_vec())
        })
        .collect::<TestResult<_>>()?;
    let mut rows: Vec<Row> = caches
        .iter_mut()
        .enumerate()
        .map(|(slot, c)| Row {
            slot: slot as u64,
            caches: c,
        })
        .collect();
    let out = model.forward_rows(&Array::from_slice(&next, &[3, 1]), &mut rows, Vec::new())?;
    for (r, want) in alone.iter().enumerate() {
        let row = out.index((r as i32, 0, ..));
        row.eval()?;
        let worst = row
            .as_slice::<f32>()
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        if worst != 0.0 {
            return Err(format!("{folder}: row {r} differs by up to {worst}").into());
        }
    }
    Ok(())
}
