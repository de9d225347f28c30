//! Loading is strict: a missing, unexpected or misshapen key is an error that names it.

use std::collections::HashMap;

use backend::models;
use backend::models::common::RankPart;
use backend::weights::{WeightMode, Weights};
use integration_tests::{fixture, TestResult};
use mlx_rs::Array;
use serde_json::Value;

fn tiny() -> TestResult<(Value, HashMap<String, Array>)> {
    let dir = fixture("tiny-qwen2")?;
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
    Ok((
        config,
        Array::load_safetensors(dir.join("model.safetensors"))?,
    ))
}

fn build_error(config: &Value, tensors: HashMap<String, Array>) -> TestResult<String> {
    match models::build(
        config,
        Weights::from_arrays(tensors, config, WeightMode::AsStored)?,
        &RankPart::full(),
    ) {
        Ok(_) => Err("loading should have failed".into()),
        Err(e) => Ok(e.to_string()),
    }
}

#[test]
fn the_checkpoint_as_it_is_loads() -> TestResult {
    let (config, tensors) = tiny()?;
    models::build(
        &config,
        Weights::from_arrays(tensors, &config, WeightMode::AsStored)?,
        &RankPart::full(),
    )?;
    Ok(())
}

#[test]
fn a_missing_key_is_named() -> TestResult {
    let (config, mut tensors) = tiny()?;
    tensors.remove("model.layers.1.self_attn.k_proj.bias");
    let err = build_error(&config, tensors)?;
    assert!(
        err.contains("missing key `model.layers.1.self_attn.k_proj.bias`"),
        "{err}"
    );
    Ok(())
}

#[test]
fn an_unexpected_key_is_named() -> TestResult {
    let (config, mut tensors) = tiny()?;
    tensors.insert(
        "model.layers.0.mlp.extra.weight".into(),
        Array::from_slice(&[1.0f32], &[1]),
    );
    let err = build_error(&config, tensors)?;
    assert!(
        err.contains("unexpected key(s)") && err.contains("model.layers.0.mlp.extra.weight"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_wrong_shape_is_named() -> TestResult {
    let (config, mut tensors) = tiny()?;
    let key = "model.layers.0.mlp.up_proj.weight";
    let bad = tensors[key].reshape(&[-1])?;
    tensors.insert(key.into(), bad);
    let err = build_error(&config, tensors)?;
    assert!(err.contains(key) && err.contains("expected"), "{err}");
    Ok(())
}

#[test]
fn an_unknown_family_lists_the_supported_ones() -> TestResult {
    let (mut config, tensors) = tiny()?;
    config["model_type"] = "gpt_neox".into();
    let err = build_error(&config, tensors)?;
    assert!(err.contains("gpt_neox") && err.contains("qwen3"), "{err}");
    Ok(())
}
