//! The engine benchmark: this engine, mlx-lm and llama.cpp on the same checkpoint, in one run, and
//! decode measured against the machine's read bandwidth.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use backend::generate::generate;
use backend::loader::{self, LoadedModel};
use backend::request::{GenerateOptions, Summary};
use backend::weights::WeightMode;
use serde::{Deserialize, Serialize};

use crate::args::BenchArgs;
use crate::{bandwidth, CliResult};

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
    /// The prompt length before the generated tokens.
    gen_after: usize,
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
        let s = run_ours(&m, plan.gen_after, gen)?;
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
            "--gen-after",
            &plan.gen_after.to_string(),
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
    let output = wait_bounded(
        "mlx-lm bench",
        child,
        Duration::from_secs(args.timeout_secs),
    )?;
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

fn cache_dir() -> PathBuf {
    std::env::var_os("MLX_DIST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/mlx-distributed")
        })
}

fn default_python() -> PathBuf {
    cache_dir().join("venv/bin/python")
}

fn wait_bounded(
    what: &str,
    mut child: std::process::Child,
    limit: Duration,
) -> CliResult<std::process::Output> {
    let start = Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > limit {
            child.kill()?;
            return Err(format!("{what} exceeded {limit:?}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(child.wait_with_output()?)
}

/// llama.cpp's benchmark and the GGUF it runs on.
struct LlamaCpp {
    bin: PathBuf,
    gguf: PathBuf,
}

/// The llama.cpp row's binary and GGUF; `None` (with a printed note) when a default is missing.
fn llama_cpp(args: &BenchArgs) -> CliResult<Option<LlamaCpp>> {
    let bin = match &args.llama_bench {
        Some(bin) if !bin.is_file() => {
            return Err(format!("--llama-bench: no {}", bin.display()).into())
        }
        Some(bin) => bin.clone(),
        None => cache_dir().join("llama.cpp/bin/llama-bench"),
    };
    let gguf = match &args.gguf {
        Some(gguf) if !gguf.is_file() => {
            return Err(format!("--gguf: no {}", gguf.display()).into())
        }
        Some(gguf) => gguf.clone(),
        None => default_gguf(&args.model),
    };
    for path in [&bin, &gguf] {
        if !path.is_file() {
            println!(
                "note: no llama.cpp row: {} is missing (build it with scripts/bench/llama-bench)",
                path.display()
            );
            return Ok(None);
        }
    }
    Ok(Some(LlamaCpp { bin, gguf }))
}

/// The fixtures' source GGUF (Q4_1), or its Q8_0 requantization for an 8-bit folder.
fn default_gguf(model: &Path) -> PathBuf {
    let name = model.file_name().unwrap_or_default().to_string_lossy();
    let quant = if name.contains("8bit") {
        "Q8_0"
    } else {
        "Q4_1"
    };
    cache_dir().join(format!("downloads/SmolLM2-135M-Instruct.{quant}.gguf"))
}

fn measure_llama_cpp(args: &BenchArgs, llama: &LlamaCpp, plan: &Plan) -> CliResult<Measured> {
    let lens: Vec<String> = plan.prompt_lens.iter().map(usize::to_string).collect();
    let lens = if lens.is_empty() {
        "0".to_string()
    } else {
        lens.join(",")
    };
    let gen = if plan.gen > 1 { plan.gen } else { 0 };
    let child = Command::new(&llama.bin)
        .arg("-m")
        .arg(&llama.gguf)
        .args(["-t", &threads(args).to_string(), "-p", &lens])
        .args([
            "-n",
            &gen.to_string(),
            "-r",
            &plan.repeats.max(1).to_string(),
        ])
        .args(["-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{}: {e}", llama.bin.display()))?;
    let output = wait_bounded("llama-bench", child, Duration::from_secs(args.timeout_secs))?;
    if !output.status.success() {
        return Err(format!("llama-bench failed on {}", llama.gguf.display()).into());
    }
    parse_llama_bench(&String::from_utf8_lossy(&output.stdout))
}

/// One test of `llama-bench -o json`: `pp<n>` has `n_gen` 0, `tg<n>` has `n_prompt` 0.
#[derive(Deserialize)]
struct LlamaBenchTest {
    n_prompt: usize,
    n_gen: usize,
    avg_ts: f64,
    #[serde(default)]
    samples_ts: Vec<f64>,
}

/// Prompt rates are the best of llama-bench's `-r` runs (as ours are the best of `--repeats`);
/// the generation rate is their mean (ours is one run per round).
fn parse_llama_bench(stdout: &str) -> CliResult<Measured> {
    let start = if stdout.starts_with('[') {
        0
    } else {
        stdout.find("\n[").ok_or("llama-bench printed no JSON")? + 1
    };
    let tests: Vec<LlamaBenchTest> = serde_json::Deserializer::from_str(&stdout[start..])
        .into_iter::<Vec<LlamaBenchTest>>()
        .next()
        .ok_or("llama-bench printed no JSON")??;
    let mut out = Measured::default();
    for t in tests {
        if t.n_gen == 0 && t.n_prompt > 0 {
            let best = t.samples_ts.iter().copied().fold(t.avg_ts, f64::max);
            out.prompt_tps.insert(t.n_prompt.to_string(), best);
        } else if t.n_prompt == 0 && t.n_gen > 0 {
            out.generation_tps = Some(t.avg_ts);
        }
    }
    Ok(out)
}

fn threads(args: &BenchArgs) -> usize {
    args.threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

const F32: &str = "ours dequantized-f32";
const PACKED: &str = "ours packed";
const AS_STORED: &str = "ours as-stored";
const LLAMA_CPP: &str = "llama.cpp";
const MLX_LM_AS_STORED: &str = "mlx-lm as-stored";
const MLX_LM_F32: &str = "mlx-lm dequantized-f32";

type Rows = Vec<(&'static str, Measured)>;

/// Keeps in `best` the better of `m` and what it holds for `label`, per prompt length and for
/// generation.
fn keep_best(best: &mut Rows, label: &'static str, m: Measured) {
    let Some((_, into)) = best.iter_mut().find(|(l, _)| *l == label) else {
        best.push((label, m));
        return;
    };
    for (n, v) in m.prompt_tps {
        let e = into.prompt_tps.entry(n).or_insert(v);
        *e = e.max(v);
    }
    into.generation_tps = match (into.generation_tps, m.generation_tps) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
}

/// The fast rows, in rounds that alternate ours (f32, then packed) with llama.cpp.
fn measure_alternating(args: &BenchArgs, plan: &Plan, llama: Option<&LlamaCpp>) -> CliResult<Rows> {
    let mut rows = Rows::new();
    let rounds = args.rounds.max(1);
    for round in 1..=rounds {
        eprintln!("[bench] round {round}/{rounds}: ours, default CPU mode (dequantized to f32)");
        keep_best(
            &mut rows,
            F32,
            measure_ours(&args.model, WeightMode::DequantizeF32, plan)?,
        );
        if cfg!(not(target_os = "macos")) {
            eprintln!(
                "[bench] round {round}/{rounds}: ours, packed (quant-cpu kernels, f32 numerics)"
            );
            keep_best(
                &mut rows,
                PACKED,
                measure_ours(&args.model, WeightMode::PackedF32, plan)?,
            );
        }
        if let Some(llama) = llama {
            eprintln!(
                "[bench] round {round}/{rounds}: llama.cpp on {}",
                llama.gguf.display()
            );
            keep_best(&mut rows, LLAMA_CPP, measure_llama_cpp(args, llama, plan)?);
        }
    }
    Ok(rows)
}

/// The slow rows, measured once: ours and mlx-lm as stored, mlx-lm on the f32 twin.
fn measure_once(args: &BenchArgs, as_stored: &Plan, fast: &Plan) -> CliResult<Rows> {
    let mut rows = Rows::new();
    if !args.skip_as_stored {
        eprintln!("[bench] ours, as stored (MLX quantized kernels, mirrors mlx-lm)");
        rows.push((
            AS_STORED,
            measure_ours(&args.model, WeightMode::AsStored, as_stored)?,
        ));
    }
    if !args.skip_mlx_lm {
        if !args.skip_as_stored {
            eprintln!("[bench] mlx-lm, as stored");
            rows.push((
                MLX_LM_AS_STORED,
                measure_mlx_lm(args, &args.model, as_stored)?,
            ));
        }
        if let Some(twin) = &args.f32_twin {
            eprintln!("[bench] mlx-lm, on the checkpoint dequantized to f32");
            rows.push((MLX_LM_F32, measure_mlx_lm(args, twin, fast)?));
        }
    }
    Ok(rows)
}

pub fn run(args: BenchArgs) -> CliResult {
    let fast = Plan {
        prompt_lens: &args.prompt_lens,
        repeats: args.repeats,
        gen: args.gen_tokens,
        gen_after: args.gen_after,
    };
    let as_stored = Plan {
        prompt_lens: &args.as_stored_prompt_lens,
        repeats: 1,
        gen: args.gen_tokens,
        gen_after: args.gen_after,
    };
    let llama = llama_cpp(&args)?;
    let mut rows = measure_alternating(&args, &fast, llama.as_ref())?;
    rows.extend(measure_once(&args, &as_stored, &fast)?);

    let name = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    print_table(&name, &rows, args.gen_tokens);
    let n = threads(&args);
    if let Some(llama) = &llama {
        println!(
            "llama.cpp: {} with -t {n}; ours uses every core (engine thread and product pool)",
            llama.gguf.display()
        );
    }
    let ratios = print_ratios(&rows);
    let mut line = serde_json::json!({
        "bench": "engine",
        "model": name,
        "threads": n,
        "llama_cpp_gguf": llama.as_ref().map(|l| l.gguf.display().to_string()),
        "measured": rows.iter().map(|(l, m)| (*l, m)).collect::<BTreeMap<_, _>>(),
        "ratios": ratios,
    });
    if !args.skip_bandwidth {
        line["bandwidth"] = report_bandwidth(&args, n, &rows, llama.as_ref());
    }
    println!("{line}");
    Ok(())
}

fn print_table(name: &str, rows: &Rows, gen_tokens: usize) {
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
    println!("{:>14}", format!("gen@{gen_tokens}"));
    for (label, m) in rows {
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
}

fn print_ratios(rows: &Rows) -> BTreeMap<&'static str, BTreeMap<String, f64>> {
    let find = |label: &str| rows.iter().find(|(l, _)| *l == label).map(|(_, m)| m);
    let mut ratios = BTreeMap::new();
    for (ours, theirs, key) in [
        (F32, MLX_LM_AS_STORED, "fast_vs_mlx_lm_as_stored"),
        (F32, MLX_LM_F32, "fast_vs_mlx_lm_same_f32"),
        (AS_STORED, MLX_LM_AS_STORED, "mirror_vs_mlx_lm_as_stored"),
        (PACKED, F32, "packed_vs_dequantized_f32"),
        (PACKED, LLAMA_CPP, "packed_vs_llama_cpp"),
        (F32, LLAMA_CPP, "dequantized_f32_vs_llama_cpp"),
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
    ratios
}

/// The bytes one generated token reads, taken as the weights' size: the safetensors files (for
/// the packed mode with 16-bit scales widened to f32; for the f32 modes the f32 twin's files,
/// or without one 4 bytes per parameter) or the GGUF file. Embedding rows a token skips are
/// counted: close enough for a model with a tied output head, which reads the whole table.
fn bytes_per_token(label: &str, args: &BenchArgs, llama: Option<&LlamaCpp>) -> Option<u64> {
    let estimate = |dir: &Path, mode| loader::resident_estimate(dir, mode).ok();
    match label {
        PACKED => estimate(&args.model, WeightMode::PackedF32),
        AS_STORED | MLX_LM_AS_STORED => estimate(&args.model, WeightMode::AsStored),
        F32 | MLX_LM_F32 => match &args.f32_twin {
            Some(twin) => estimate(twin, WeightMode::AsStored),
            None => bandwidth::f32_bytes(&args.model),
        },
        LLAMA_CPP => llama
            .and_then(|l| std::fs::metadata(&l.gguf).ok())
            .map(|m| m.len()),
        _ => None,
    }
}

/// Measures the read bandwidth and prints each row's decode as a fraction of the rate it
/// allows; returns the JSON line's `bandwidth` entry.
fn report_bandwidth(
    args: &BenchArgs,
    threads: usize,
    rows: &Rows,
    llama: Option<&LlamaCpp>,
) -> serde_json::Value {
    eprintln!("[bench] read bandwidth ({threads} threads)");
    let gb_per_s = bandwidth::read_gb_per_s(threads);
    println!(
        "\nread bandwidth {gb_per_s:.1} GB/s ({threads} threads streaming {} MiB, best of {})",
        bandwidth::BUFFER_BYTES >> 20,
        bandwidth::PASSES
    );
    println!("decode against the limit of reading each token's bytes (the weight files' size)");
    println!(
        "{:<24}{:>12}{:>14}{:>14}{:>10}",
        "engine", "MB/token", "limit tok/s", "decode tok/s", "fraction"
    );
    let mut fractions = BTreeMap::new();
    let mut bytes = BTreeMap::new();
    for (label, m) in rows {
        let (Some(tps), Some(b)) = (m.generation_tps, bytes_per_token(label, args, llama)) else {
            continue;
        };
        let limit = bandwidth::limit_tok_per_s(b, gb_per_s);
        let mb = b as f64 / 1e6;
        println!(
            "{label:<24}{mb:>12.1}{limit:>14.1}{tps:>14.2}{:>10.2}",
            tps / limit
        );
        fractions.insert(*label, tps / limit);
        bytes.insert(*label, b);
    }
    serde_json::json!({
        "gb_per_s": gb_per_s,
        "threads": threads,
        "bytes_per_token": bytes,
        "fraction_of_limit": fractions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llama_bench_json() {
        let out = r#"[
  {
    "n_prompt": 128,
    "n_gen": 0,
    "avg_ts": 900.5,
    "samples_ts": [ 880.0, 921.0 ]
  },
  {
    "n_prompt": 0,
    "n_gen": 64,
    "avg_ts": 150.25,
    "samples_ts": [ 150.0 ]
  }
]
"#;
        let m = parse_llama_bench(out).unwrap();
        assert_eq!(m.prompt_tps.get("128"), Some(&921.0));
        assert_eq!(m.generation_tps, Some(150.25));
        let m = parse_llama_bench(&format!("build: x\n{out}")).unwrap();
        assert_eq!(m.generation_tps, Some(150.25));
    }

    #[test]
    fn keeps_the_best_of_rounds() {
        let mut rows = Rows::new();
        let m = |p: f64, g: Option<f64>| Measured {
            prompt_tps: BTreeMap::from([("128".to_string(), p)]),
            generation_tps: g,
        };
        keep_best(&mut rows, PACKED, m(10.0, Some(2.0)));
        keep_best(&mut rows, PACKED, m(12.0, Some(1.0)));
        keep_best(&mut rows, PACKED, m(11.0, None));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].1.prompt_tps.get("128"), Some(&12.0));
        assert_eq!(rows[0].1.generation_tps, Some(2.0));
    }
}
