//! mlx-lm's greedy generations, as `scripts/fetch-test-model` records them.

use serde::Deserialize;

use crate::{cache_dir, TestResult};

#[derive(Debug, Deserialize)]
pub struct Goldens {
    pub model: String,
    pub max_tokens: usize,
    pub cases: Vec<GoldenCase>,
}

#[derive(Debug, Deserialize)]
pub struct GoldenCase {
    pub name: String,
    pub prompt: String,
    pub chat: bool,
    pub prompt_ids: Vec<u32>,
    pub tokens: Vec<u32>,
    pub finish: String,
    pub text: String,
}

/// Goldens of one fixture folder, e.g. `smollm2-135m-4bit-f32`.
pub fn load(name: &str) -> TestResult<Goldens> {
    let path = cache_dir()
        .join("fixtures/goldens")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e} (run scripts/fetch-test-model)", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// The first index where `ours` and `golden` differ, if any (a length difference counts).
pub fn first_difference(ours: &[u32], golden: &[u32]) -> Option<usize> {
    let common = ours.iter().zip(golden).take_while(|(a, b)| a == b).count();
    (common < ours.len().max(golden.len())).then_some(common)
}

#[derive(Debug, Deserialize)]
pub struct TinyGolden {
    pub prompt_ids: Vec<u32>,
    pub tokens: Vec<u32>,
    pub last_logits: Vec<f32>,
}

pub fn load_tiny(folder: &str) -> TestResult<TinyGolden> {
    load_tiny_file(folder, "golden.json")
}

/// A tiny fixture's golden from `file` (a quantized fixture has one per numerics).
pub fn load_tiny_file(folder: &str, file: &str) -> TestResult<TinyGolden> {
    let path = crate::fixture(folder)?.join(file);
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// `m`'s greedy continuation of `ids`, `n` tokens, never stopping at an end token (as the
/// goldens were made).
pub fn greedy_tokens(
    m: &backend::loader::LoadedModel,
    ids: &[u32],
    n: usize,
) -> TestResult<Vec<u32>> {
    let opts = backend::request::GenerateOptions {
        max_tokens: n,
        ignore_eos: true,
        ..Default::default()
    };
    let mut tokens = Vec::new();
    backend::generate::generate(m.model.as_ref(), &m.tokenizer, ids, &opts, |e| {
        tokens.push(e.id);
        true
    })?;
    Ok(tokens)
}
