//! `worker bench`: this engine and mlx-lm on the same checkpoint and token ids, in one run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use backend::generate::{generate, GenerateOptions, Summary};
use backend::loader::{self, LoadedModel};
use backend::weights::WeightMode;
use serde::{Deserialize, Serialize};

use super::CliResult;
use crate::args::BenchArgs;

/// What one engine measured; tok/s.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Measured {
    prompt_tps: BTreeMap<String, f64>,
    generation_tps: Option<f64>,
}

/// The benchmark's prompt, identical to `scripts/bench/mlx_lm_engine.py`'s.
fn bench_ids(n: usize) -> Vec<u32> {
    (0..n).map(|i| 100 + ((i * 7919) % 40000) as u32).collect()
}

fn run_ours(
    m: &LoadedModel,
    n_prompt: usize,
    max_tokens: usize,
) -> backend::error::Result<Summary> {
    let opts = GenerateOptions {
        max_tokens,
        ignore_eos: true,
        ..Default::default()
    };
    generate(
        m.model.as_ref(),
        &m.tokenizer,
        &bench_ids(n_prompt),
        &opts,
        |_| true,
    )
}

/// What one engine is measured on: prompt lengths, each run `repeats` times (the best counts),
/// then `gen` generated tokens.
struct Plan<'a> {
    prompt_lens: &'a [usize],
    repeats: usize,
    gen: usize,
}

fn measure_ours(dir: &Path, mode: WeightMode, plan: &Plan) -> CliResult<Measured> {
    let m = loader::load(dir, mode)?;
    run_ours(&m, 16, 2)?; // warm-up
    let mut out = Measured::default();
    for &n in plan.prompt_lens {
        let mut best = 0.0f64;
        for _ in 0..plan.repeats.max(1) {
            best = best.max(n as f64 / run_ours(&m, n, 1)?.prefill_secs);
        }
        out.prompt_tps.insert(n.to_string(), best);
    }
    let gen = plan.gen;
    if gen > 1 {
        let s = run_ours(&m, 16, gen)?;
        out.generation_tps = Some((s.generated_tokens - 1) as f64 / s.decode_secs);
    }
    Ok(out)
}

fn measure_mlx_lm(args: &BenchArgs, dir: &Path, plan: &Plan) -> CliResult<Measured> {
    let python = args.python.clone().unwrap_or_else(default_python);
    let lens: Vec<String> = plan.prompt_lens.iter().map(usize::to_string).collect();
    let mut cmd = Command::new(&python);
    cmd.arg(&args.mlx_lm_script)
        .arg("--model")
        .arg(dir)
        .args([
            "--prompt-lens",
            &lens.join(","),
            "--gen-tokens",
            &plan.gen.to_string(),
            "--repeats",
            &plan.repeats.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // The same BLAS for both: our binaries link OpenBLAS ahead of MLX's reference BLAS.
    let openblas = Path::new("/usr/lib/x86_64-linux-gnu/libblas.so.3");
    if openblas.exists() {
        cmd.env("LD_PRELOAD", openblas);
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e} (run scripts/fetch-test-model)", python.display()))?;
    let output = wait_bounded(child, Duration::from_secs(args.timeout_secs))?;
    if !output.status.success() {
        return Err(format!("mlx-lm bench failed on {}", dir.display()).into());
    }
    let last = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    Ok(serde_json::from_str(&last)?)
}

fn default_python() -> PathBuf {
    let cache = std::env::var_os("MLX_DIST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/mlx-distributed")
        });
    cache.join("venv/bin/python")
}

fn wait_bounded(
    mut child: std::process::Child,
    limit: Duration,
) -> CliResult<std::process::Output> {
    let start = Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > limit {
            child.kill()?;
            return Err(format!("mlx-lm bench exceeded {limit:?}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(child.wait_with_output()?)
}

fn ratio(a: &Measured, b: &Measured) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (n, ours) in &a.prompt_tps {
        if let Some(theirs) = b.prompt_tps.get(n) {
            out.insert(format!("prompt@{n}"), ours / theirs);
        }
    }
    if let (Some(x), Some(y)) = (a.generation_tps, b.generation_tps) {
        out.insert("generation".to_string(), x / y);
    }
    out
}

pub fn run(args: BenchArgs) -> CliResult {
    let mut rows: Vec<(&str, Measured)> = Vec::new();
    let fast = Plan {
        prompt_lens: &args.prompt_lens,
        repeats: args.repeats,
        gen: args.gen_tokens,
    };
    let as_stored = Plan {
        prompt_lens: &args.as_stored_prompt_lens,
        repeats: 1,
        gen: args.gen_tokens,
    };
    eprintln!("[bench] ours, default CPU mode (dequantized to f32)");
    let ours = measure_ours(&args.model, WeightMode::DequantizeF32, &fast)?;
    rows.push(("ours dequantized-f32", ours));
    if cfg!(not(target_os = "macos")) {
        eprintln!("[bench] ours, packed as stored (quant-cpu kernels, f32 numerics)");
        let ours = measure_ours(&args.model, WeightMode::PackedF32, &fast)?;
        rows.push(("ours packed", ours));
    }
    if !args.skip_as_stored {
        eprintln!("[bench] ours, as stored (MLX quantized kernels, mirrors mlx-lm)");
        let ours = measure_ours(&args.model, WeightMode::AsStored, &as_stored)?;
        rows.push(("ours as-stored", ours));
    }
    if !args.skip_mlx_lm {
        if !args.skip_as_stored {
            eprintln!("[bench] mlx-lm, as stored");
            let theirs = measure_mlx_lm(&args, &args.model, &as_stored)?;
            rows.push(("mlx-lm as-stored", theirs));
        }
        if let Some(twin) = &args.f32_twin {
            eprintln!("[bench] mlx-lm, on the checkpoint dequantized to f32");
            rows.push((
                "mlx-lm dequantized-f32",
                measure_mlx_lm(&args, twin, &fast)?,
            ));
        }
    }

    let name = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut lens: Vec<String> = rows
        .iter()
        .flat_map(|(_, m)| m.prompt_tps.keys().cloned())
        .collect();
    lens.sort_by_key(|n| n.parse::<usize>().unwrap_or(0));
    lens.dedup();
    println!("\nmodel {name}: tok/s");
    print!("{:<24}", "engine");
    lens.iter()
        .for_each(|n| print!("{:>12}", format!("prompt@{n}")));
    println!("{:>14}", format!("gen@{}", args.gen_tokens));
    for (label, m) in &rows {
        print!("{label:<24}");
        lens.iter().for_each(|n| {
            print!(
                "{:>12}",
                m.prompt_tps
                    .get(n)
                    .map_or("-".into(), |v| format!("{v:.1}"))
            )
        });
        println!(
            "{:>14}",
            m.generation_tps.map_or("-".into(), |v| format!("{v:.2}"))
        );
    }
    let find = |label: &str| rows.iter().find(|(l, _)| *l == label).map(|(_, m)| m);
    let mut ratios = BTreeMap::new();
    for (ours, theirs, key) in [
        (
            "ours dequantized-f32",
            "mlx-lm as-stored",
            "fast_vs_mlx_lm_as_stored",
        ),
        (
            "ours dequantized-f32",
            "mlx-lm dequantized-f32",
            "fast_vs_mlx_lm_same_f32",
        ),
        (
            "ours as-stored",
            "mlx-lm as-stored",
            "mirror_vs_mlx_lm_as_stored",
        ),
        (
            "ours packed",
            "ours dequantized-f32",
            "packed_vs_dequantized_f32",
        ),
    ] {
        if let (Some(a), Some(b)) = (find(ours), find(theirs)) {
            let r = ratio(a, b);
            println!(
                "{key}: {}",
                r.iter()
                    .map(|(k, v)| format!("{k} {v:.2}x"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            ratios.insert(key, r);
        }
    }
    let measured: BTreeMap<&str, &Measured> = rows.iter().map(|(l, m)| (*l, m)).collect();
    println!(
        "{}",
        serde_json::json!({ "bench": "engine", "model": name, "measured": measured, "ratios": ratios })
    );
    Ok(())
}
