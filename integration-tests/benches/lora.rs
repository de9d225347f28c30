//! What a LoRA adapter costs per token: SmolLM2 with the fixture adapter (rank 8 on every
//! projection of its last 8 layers) against the model alone, fused into the f32 model, at run
//! time on it, and at run time beside the 4-bit model's packed kernels (a quantized base always
//! takes its update at run time); mlx-lm on the f32 model, with and without the adapter (its
//! run-time `LoRALinear`), is the bar. Decode tok/s, greedy, the best of RUNS.

use std::process::Command;
use std::time::Duration;

use backend::generate::generate;
use backend::loader::{self, Recipe};
use backend::lora::{AdapterPlan, AdapterSpec, Merge};
use backend::request::GenerateOptions;
use backend::source::Lookup;
use backend::weights::WeightMode;
use integration_tests::{fixture, mlx_lm, TestResult};

const TOKENS: usize = 128;
const RUNS: usize = 3;
const F32: &str = "smollm2-135m-4bit-f32";
const PACKED: &str = "smollm2-135m-4bit";

/// The benchmark's prompt ids, as `scripts/bench/mlx_lm_engine.py` makes them.
fn bench_ids(n: usize) -> Vec<u32> {
    (0..n).map(|i| 100 + ((i * 7919) % 40000) as u32).collect()
}

/// Our decode tok/s on `model` with the adapter merged as `merge` (`None`: no adapter).
fn ours(model: &str, merge: Option<Merge>) -> TestResult<f64> {
    let adapter = fixture("adapters")?.join("smollm2-mlx");
    let plan = AdapterPlan {
        adapters: merge
            .iter()
            .map(|_| AdapterSpec {
                name: adapter.to_string_lossy().into_owned(),
                scale: 1.0,
            })
            .collect(),
        merge: merge.unwrap_or_default(),
    };
    let adapters = backend::source::resolve_adapters(&plan, &Lookup::default())?;
    let recipe = Recipe {
        mode: WeightMode::default_for_device(),
        adapters: &adapters,
    };
    let m = loader::load_adapted(&fixture(model)?, recipe, Default::default())?;
    let opts = |max_tokens| GenerateOptions {
        max_tokens,
        ignore_eos: true,
        ..Default::default()
    };
    let mut best = 0.0f64;
    for max_tokens in std::iter::once(4).chain([TOKENS; RUNS]) {
        let s = generate(
            m.model.as_ref(),
            &m.tokenizer,
            &bench_ids(16),
            &opts(max_tokens),
            |_| true,
        )?;
        best = best.max((s.generated_tokens - 1) as f64 / s.decode_secs);
    }
    Ok(best)
}

/// mlx-lm's decode tok/s on the f32 model, with the adapter or without.
fn theirs(adapter: bool) -> TestResult<f64> {
    let mut cmd = Command::new(mlx_lm::venv_bin().join("python"));
    cmd.arg(mlx_lm::script("mlx_lm_engine.py"))
        .arg("--model")
        .arg(fixture(F32)?)
        .args(["--prompt-lens", "", "--gen-tokens", &TOKENS.to_string()]);
    if adapter {
        cmd.arg("--adapter")
            .arg(fixture("adapters")?.join("smollm2-mlx"));
    }
    let v = mlx_lm::json_output(cmd, Duration::from_secs(600))?;
    v["generation_tps"]
        .as_f64()
        .ok_or_else(|| "mlx-lm printed no generation_tps".into())
}

fn main() -> TestResult {
    let (bar_plain, bar_lora) = (theirs(false)?, theirs(true)?);
    println!("mlx-lm {F32}: {bar_plain:.1} tok/s alone, {bar_lora:.1} with the adapter");
    for (model, merge) in [
        (F32, Merge::Fuse),
        (F32, Merge::RunTime),
        (PACKED, Merge::Fuse),
    ] {
        let plain = ours(model, None)?;
        let adapted = ours(model, Some(merge))?;
        println!(
            "{model} {merge:?}: {adapted:.1} tok/s with the adapter, {plain:.1} alone ({:.2}x); \
             {:.2}x mlx-lm with the adapter",
            adapted / plain,
            adapted / bar_lora
        );
    }
    Ok(())
}
