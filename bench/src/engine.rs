//! The engine benchmark: this engine, mlx-lm and llama.cpp on the same checkpoint, in one run, and
//! decode measured against the machine's read bandwidth.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use backend::generate::generate;
use backend::loader::{self, LoadedModel};
use backend::request::{GenerateOptions, Summary};
use backend::weights::WeightMode;
use serde::{Deserialize, Serialize};

use crate::args::BenchArgs;
use crate::{bandwidth, CliResult};

/// What one engine measured; tok/s.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Measured {
    prompt_tps: BTreeMap<String, f64>,
    generation_tps: Option<f64>,
    /// Why a run of this row failed; the row then shows as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed: Option<String>,
    /// Why the prompt runs failed where generation ran (llama.cpp's prompt kernels can crash
    /// where its decode runs, as its AMX ones do on some hosts); their cells show as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt_failed: Option<String>,
}

impl Measured {
    fn failed(why: String) -> Self {
        Measured {
            failed: Some(why),
            ..Default::default()
        }
    }
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
            child.wait()?;
            return Err(format!("{what} exceeded {limit:?}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(child.wait_with_output()?)
}

/// One llama.cpp build: its row's label and its `llama-bench`.
struct LlamaBuild {
    label: &'static str,
    bin: PathBuf,
}

/// llama.cpp's builds and the GGUF they run on.
struct LlamaCpp {
    builds: Vec<LlamaBuild>,
    gguf: PathBuf,
}

/// Where a llama.cpp build's `llama-bench` is: the flag's path, else the default.
struct BuildSpec<'a> {
    label: &'static str,
    flag: &'static str,
    given: Option<&'a Path>,
    default: PathBuf,
}

/// The builds whose binary exists; a missing default is a printed note, a missing given path an
/// error.
fn pick_builds(specs: Vec<BuildSpec>) -> CliResult<Vec<LlamaBuild>> {
    let mut builds = Vec::new();
    for spec in specs {
        let bin = match spec.given {
            Some(bin) if !bin.is_file() => {
                return Err(format!("{}: no {}", spec.flag, bin.display()).into())
            }
            Some(bin) => bin.to_path_buf(),
            None if spec.default.is_file() => spec.default,
            None => {
                println!(
                    "note: no {} row: {} is missing (build it with scripts/bench/llama-bench)",
                    spec.label,
                    spec.default.display()
                );
                continue;
            }
        };
        builds.push(LlamaBuild {
            label: spec.label,
            bin,
        });
    }
    Ok(builds)
}

/// The llama.cpp rows' builds and GGUF; `None` (with a printed note) when no build or the
/// default GGUF is missing.
fn llama_cpp(args: &BenchArgs) -> CliResult<Option<LlamaCpp>> {
    let root = cache_dir().join("llama.cpp");
    let builds = pick_builds(vec![
        BuildSpec {
            label: LLAMA_NATIVE,
            flag: "--llama-bench",
            given: args.llama_bench.as_deref(),
            default: root.join("bin/llama-bench"),
        },
        BuildSpec {
            label: LLAMA_GENERIC,
            flag: "--llama-bench-generic",
            given: args.llama_bench_generic.as_deref(),
            default: root.join("bin-generic/llama-bench"),
        },
    ])?;
    let gguf = match &args.gguf {
        Some(gguf) if !gguf.is_file() => {
            return Err(format!("--gguf: no {}", gguf.display()).into())
        }
        Some(gguf) => gguf.clone(),
        None => default_gguf(&args.model),
    };
    if builds.is_empty() {
        return Ok(None);
    }
    if !gguf.is_file() {
        println!(
            "note: no llama.cpp rows: {} is missing (make it with scripts/bench/llama-bench)",
            gguf.display()
        );
        return Ok(None);
    }
    Ok(Some(LlamaCpp { builds, gguf }))
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

/// What a finished run's status says went wrong, or `None` when it succeeded.
fn run_failure(status: ExitStatus) -> Option<String> {
    if status.success() {
        return None;
    }
    Some(match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by {}", signal_name(signal)),
        (None, None) => format!("ended with {status}"),
    })
}

/// A signal's number and, for those a crash or a kill sends, its name.
fn signal_name(signal: i32) -> String {
    let name = match signal {
        4 => "SIGILL, an instruction this CPU lacks",
        6 => "SIGABRT",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("signal {signal} ({name})")
}

/// A build's `llama-bench` on the plan: its prompt lengths and its generation as two runs,
/// so that one that crashes leaves the other's rates (`prompts` false: the generation alone).
/// A run's error says what went wrong; the row fails only when every run did.
fn measure_llama_cpp(
    args: &BenchArgs,
    (gguf, build): (&Path, &LlamaBuild),
    plan: &Plan,
    prompts: bool,
) -> Measured {
    let lens: Vec<String> = plan.prompt_lens.iter().map(usize::to_string).collect();
    let mut out = Measured::default();
    let mut failures = Vec::new();
    if prompts && !lens.is_empty() {
        match run_llama_bench(args, (gguf, build), (&lens.join(","), 0), plan.repeats) {
            Ok(m) => out.prompt_tps = m.prompt_tps,
            Err(e) => {
                out.prompt_failed = Some(e.to_string());
                failures.push(format!("prompts: {e}"));
            }
        }
    }
    if plan.gen > 1 {
        match run_llama_bench(args, (gguf, build), ("0", plan.gen), plan.repeats) {
            Ok(m) => out.generation_tps = m.generation_tps,
            Err(e) => failures.push(format!("generation: {e}")),
        }
    }
    if out.prompt_tps.is_empty() && out.generation_tps.is_none() && !failures.is_empty() {
        return Measured::failed(failures.join("; "));
    }
    out
}

/// One run of `llama-bench` (`-p lens -n gen`); an error says what went wrong (it could not
/// start, was killed at the time limit, exited non-zero or by a signal, or printed no JSON).
fn run_llama_bench(
    args: &BenchArgs,
    (gguf, build): (&Path, &LlamaBuild),
    (lens, gen): (&str, usize),
    repeats: usize,
) -> CliResult<Measured> {
    let child = Command::new(&build.bin)
        .arg("-m")
        .arg(gguf)
        .args(["-t", &threads(args).to_string(), "-p", lens])
        .args(["-n", &gen.to_string(), "-r", &repeats.max(1).to_string()])
        .args(["-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not start: {e}"))?;
    let output = wait_bounded("llama-bench", child, Duration::from_secs(args.timeout_secs))?;
    if let Some(failure) = run_failure(output.status) {
        return Err(failure.into());
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
const PACKED_INT8: &str = "ours packed int8";
const AS_STORED: &str = "ours as-stored";
const LLAMA_NATIVE: &str = "llama.cpp native";
const LLAMA_GENERIC: &str = "llama.cpp generic";
const MLX_LM_AS_STORED: &str = "mlx-lm as-stored";
const MLX_LM_F32: &str = "mlx-lm dequantized-f32";

type Rows = Vec<(&'static str, Measured)>;

/// Keeps in `best` the better of `m` and what it holds for `label`, per prompt length and for
/// generation, and the first failure.
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
    into.failed = into.failed.take().or(m.failed);
    into.prompt_failed = into.prompt_failed.take().or(m.prompt_failed);
}

fn row_failed(rows: &Rows, label: &str) -> bool {
    rows.iter().any(|(l, m)| *l == label && m.failed.is_some())
}

fn prompts_failed(rows: &Rows, label: &str) -> bool {
    rows.iter()
        .any(|(l, m)| *l == label && m.prompt_failed.is_some())
}

/// One round of a llama.cpp build (its prompt runs only if `prompts`: not where an earlier
/// round's failed). A failure is a printed line naming the build and what happened, and marks
/// its row, or its prompt cells, failed.
fn llama_round(
    args: &BenchArgs,
    (plan, prompts): (&Plan, bool),
    (llama, build): (&LlamaCpp, &LlamaBuild),
    rows: &mut Rows,
    round: usize,
) {
    eprintln!(
        "[bench] round {round}/{}: {} on {}",
        args.rounds.max(1),
        build.label,
        llama.gguf.display()
    );
    let mut m = measure_llama_cpp(args, (&llama.gguf, build), plan, prompts);
    for why in [&mut m.failed, &mut m.prompt_failed].into_iter().flatten() {
        *why = format!("round {round}: {why}");
    }
    let bin = build.bin.display();
    match (&m.failed, &m.prompt_failed) {
        (Some(why), _) => println!("{} failed ({bin}): {why}", build.label),
        (None, Some(why)) => println!("{} prompts failed ({bin}): {why}", build.label),
        (None, None) => {}
    }
    keep_best(rows, build.label, m);
}

/// Our rows' generation rates over the better llama.cpp build's in the same round, per round
/// (rows without both in a round skip it). On a shared machine the memory's rate drifts
/// between rounds by more than the gaps measured, so a ratio within a round is the steadier
/// figure: neighbouring runs share the drift.
fn round_ratios(rounds: &[Rows]) -> BTreeMap<&'static str, Vec<f64>> {
    let gen = |rows: &Rows, label: &str| {
        rows.iter()
            .find(|(l, m)| *l == label && m.failed.is_none())
            .and_then(|(_, m)| m.generation_tps)
    };
    let mut out: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for rows in rounds {
        let bar = [LLAMA_NATIVE, LLAMA_GENERIC]
            .iter()
            .filter_map(|l| gen(rows, l))
            .reduce(f64::max);
        let Some(bar) = bar.filter(|b| *b > 0.0) else {
            continue;
        };
        for (label, _, _) in OURS_FAST {
            if let Some(v) = gen(rows, label) {
                out.entry(label).or_default().push(v / bar);
            }
        }
    }
    out
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Prints [`round_ratios`] (one line a row of ours) and returns them with their medians.
fn print_round_ratios(rounds: &[Rows]) -> serde_json::Value {
    let ratios = round_ratios(rounds);
    let mut json = serde_json::Map::new();
    for (label, r) in &ratios {
        let each: Vec<String> = r.iter().map(|v| format!("{v:.2}")).collect();
        let mid = median(r);
        println!(
            "{label} decode / the round's better llama.cpp, per round: {} (median {mid:.2})",
            each.join(" ")
        );
        json.insert(
            label.to_string(),
            serde_json::json!({ "per_round": r, "median": mid }),
        );
    }
    serde_json::Value::Object(json)
}

/// Our CPU rows of a round: (label, weight mode, what it is).
const OURS_FAST: [(&str, WeightMode, &str); 3] = [
    (F32, WeightMode::DequantizeF32, "dequantized to f32"),
    (
        PACKED,
        WeightMode::PackedF32,
        "packed (quant-cpu kernels, f32 numerics)",
    ),
    (
        PACKED_INT8,
        WeightMode::PackedInt8,
        "packed (cpu_numerics:int8)",
    ),
];

/// What [`measure_alternating`] measured: each row's best, the best read bandwidth, and each
/// round's rows.
struct Alternated {
    rows: Rows,
    bandwidth: Option<f64>,
    rounds: Vec<Rows>,
}

/// The fast rows, in rounds that alternate ours (f32, packed, packed int8) with each llama.cpp
/// build, and (unless skipped) the best read bandwidth of a measurement at the end of each
/// round: the memory of a shared machine changes by half within a run, so the limit is sampled
/// as often and in the same alternation as the decodes it bounds.
fn measure_alternating(
    args: &BenchArgs,
    plan: &Plan,
    llama: Option<&LlamaCpp>,
) -> CliResult<Alternated> {
    let mut rows = Rows::new();
    let mut each_round = Vec::new();
    let mut bandwidth: Option<f64> = None;
    let rounds = args.rounds.max(1);
    for round in 1..=rounds {
        let mut this_round = Rows::new();
        for (label, mode, what) in OURS_FAST {
            let packed = mode != WeightMode::DequantizeF32;
            if (packed && cfg!(target_os = "macos")) || (!packed && args.skip_dequantized) {
                continue;
            }
            eprintln!("[bench] round {round}/{rounds}: ours, {what}");
            keep_best(
                &mut this_round,
                label,
                measure_ours(&args.model, mode, plan)?,
            );
        }
        if let Some(llama) = llama {
            // A build that failed in an earlier round is not run again, nor its prompt runs.
            for build in llama.builds.iter().filter(|b| !row_failed(&rows, b.label)) {
                let prompts = !prompts_failed(&rows, build.label);
                llama_round(
                    args,
                    (plan, prompts),
                    (llama, build),
                    &mut this_round,
                    round,
                );
            }
        }
        for (label, m) in &this_round {
            keep_best(&mut rows, label, m.clone());
        }
        each_round.push(this_round);
        if !args.skip_bandwidth {
            let threads = threads(args);
            eprintln!("[bench] round {round}/{rounds}: read bandwidth ({threads} threads)");
            let gb = bandwidth::read_gb_per_s(threads);
            bandwidth = Some(bandwidth.map_or(gb, |b| b.max(gb)));
        }
    }
    Ok(Alternated {
        rows,
        bandwidth,
        rounds: each_round,
    })
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
    let Alternated {
        mut rows,
        bandwidth: gb_per_s,
        rounds,
    } = measure_alternating(&args, &fast, llama.as_ref())?;
    rows.extend(measure_once(&args, &as_stored, &fast)?);

    let name = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    print_table(&name, &rows, args.gen_tokens);
    let n = threads(&args);
    if let Some(llama) = &llama {
        print_llama_cpp(llama, n);
    }
    let ratios = print_ratios(&rows);
    let per_round = print_round_ratios(&rounds);
    let mut line = serde_json::json!({
        "bench": "engine",
        "model": name,
        "threads": n,
        "llama_cpp_gguf": llama.as_ref().map(|l| l.gguf.display().to_string()),
        "llama_cpp_bins": llama.as_ref().map(|l| {
            l.builds
                .iter()
                .map(|b| (b.label, b.bin.display().to_string()))
                .collect::<BTreeMap<_, _>>()
        }),
        "measured": rows.iter().map(|(l, m)| (*l, m)).collect::<BTreeMap<_, _>>(),
        "ratios": ratios,
        "decode_ratios_per_round": per_round,
    });
    if let Some(gb_per_s) = gb_per_s {
        line["bandwidth"] = report_bandwidth(&args, (n, gb_per_s), &rows, llama.as_ref());
    }
    println!("{line}");
    Ok(())
}

fn print_llama_cpp(llama: &LlamaCpp, threads: usize) {
    println!(
        "llama.cpp: {} with -t {threads}; ours uses every core (engine thread and product pool)",
        llama.gguf.display()
    );
    // Our prefill's f32 panels (exact numerics) run on these.
    println!("ours: {}", skinny_gemm::blas_kernels());
    for build in &llama.builds {
        println!("  {}: {}", build.label, build.bin.display());
    }
}

/// A row of the table: its rates under each prompt length then generation, or its failure.
fn table_line(label: &str, m: &Measured, lens: &[String]) -> String {
    if let Some(why) = &m.failed {
        return format!("{label:<24}failed ({why})");
    }
    let mut line = format!("{label:<24}");
    for n in lens {
        let cell = match (m.prompt_tps.get(n), &m.prompt_failed) {
            (Some(v), _) => format!("{v:.1}"),
            (None, Some(_)) => "failed".into(),
            (None, None) => "-".into(),
        };
        line.push_str(&format!("{cell:>12}"));
    }
    let gen = m.generation_tps.map_or("-".into(), |v| format!("{v:.2}"));
    line.push_str(&format!("{gen:>14}"));
    line
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
        println!("{}", table_line(label, m, &lens));
    }
}

/// The ratios reported: (numerator row, denominator row, key).
const RATIOS: &[(&str, &str, &str)] = &[
    (F32, MLX_LM_AS_STORED, "fast_vs_mlx_lm_as_stored"),
    (F32, MLX_LM_F32, "fast_vs_mlx_lm_same_f32"),
    (AS_STORED, MLX_LM_AS_STORED, "mirror_vs_mlx_lm_as_stored"),
    (PACKED, F32, "packed_vs_dequantized_f32"),
    (PACKED, LLAMA_NATIVE, "packed_vs_llama_cpp_native"),
    (PACKED, LLAMA_GENERIC, "packed_vs_llama_cpp_generic"),
    (PACKED_INT8, PACKED, "packed_int8_vs_packed"),
    (PACKED_INT8, LLAMA_NATIVE, "packed_int8_vs_llama_cpp_native"),
    (
        PACKED_INT8,
        LLAMA_GENERIC,
        "packed_int8_vs_llama_cpp_generic",
    ),
    (F32, LLAMA_NATIVE, "dequantized_f32_vs_llama_cpp_native"),
    (F32, LLAMA_GENERIC, "dequantized_f32_vs_llama_cpp_generic"),
    (LLAMA_NATIVE, LLAMA_GENERIC, "llama_cpp_native_vs_generic"),
];

/// Each of `RATIOS` whose two rows were measured and did not fail.
fn ratios(rows: &Rows) -> BTreeMap<&'static str, BTreeMap<String, f64>> {
    let find = |label: &str| {
        rows.iter()
            .find(|(l, m)| *l == label && m.failed.is_none())
            .map(|(_, m)| m)
    };
    let mut out = BTreeMap::new();
    for &(ours, theirs, key) in RATIOS {
        if let (Some(a), Some(b)) = (find(ours), find(theirs)) {
            out.insert(key, ratio(a, b));
        }
    }
    out
}

fn print_ratios(rows: &Rows) -> BTreeMap<&'static str, BTreeMap<String, f64>> {
    let ratios = ratios(rows);
    for (key, r) in RATIOS
        .iter()
        .filter_map(|(_, _, k)| ratios.get_key_value(k))
    {
        let parts: Vec<String> = r.iter().map(|(k, v)| format!("{k} {v:.2}x")).collect();
        println!("{key}: {}", parts.join(", "));
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
        PACKED | PACKED_INT8 => estimate(&args.model, WeightMode::PackedF32),
        AS_STORED | MLX_LM_AS_STORED => estimate(&args.model, WeightMode::AsStored),
        F32 | MLX_LM_F32 => match &args.f32_twin {
            Some(twin) => estimate(twin, WeightMode::AsStored),
            None => bandwidth::f32_bytes(&args.model),
        },
        LLAMA_NATIVE | LLAMA_GENERIC => llama
            .and_then(|l| std::fs::metadata(&l.gguf).ok())
            .map(|m| m.len()),
        _ => None,
    }
}

/// Prints each row's decode as a fraction of the rate the run's best read bandwidth allows
/// (a decode faster than that is named: the probe then understates the limit, and every
/// fraction overstates); returns the JSON line's `bandwidth` entry.
fn report_bandwidth(
    args: &BenchArgs,
    (threads, gb_per_s): (usize, f64),
    rows: &Rows,
    llama: Option<&LlamaCpp>,
) -> serde_json::Value {
    println!(
        "\nread bandwidth {gb_per_s:.1} GB/s ({threads} threads streaming {} MiB as {:?} streams \
         each, best of {} passes in each of {} rounds)",
        bandwidth::BUFFER_BYTES >> 20,
        bandwidth::STREAMS,
        bandwidth::PASSES,
        args.rounds.max(1)
    );
    println!("decode against the limit of reading each token's bytes (the weight files' size)");
    println!(
        "{:<24}{:>12}{:>14}{:>14}{:>10}",
        "engine", "MB/token", "limit tok/s", "decode tok/s", "fraction"
    );
    let mut fractions = BTreeMap::new();
    let mut bytes = BTreeMap::new();
    for (label, m) in rows.iter().filter(|(_, m)| m.failed.is_none()) {
        let (Some(tps), Some(b)) = (m.generation_tps, bytes_per_token(label, args, llama)) else {
            continue;
        };
        let limit = bandwidth::limit_tok_per_s(b, gb_per_s);
        let mb = b as f64 / 1e6;
        println!(
            "{label:<24}{mb:>12.1}{limit:>14.1}{tps:>14.2}{:>10.2}",
            tps / limit
        );
        if tps > limit {
            println!("  {label} decoded faster than the probe read: the fractions overstate");
        }
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
            ..Default::default()
        };
        keep_best(&mut rows, PACKED, m(10.0, Some(2.0)));
        keep_best(&mut rows, PACKED, m(12.0, Some(1.0)));
        keep_best(&mut rows, PACKED, m(11.0, None));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].1.prompt_tps.get("128"), Some(&12.0));
        assert_eq!(rows[0].1.generation_tps, Some(2.0));
    }

    fn measured(p: f64, g: f64) -> Measured {
        Measured {
            prompt_tps: BTreeMap::from([("128".to_string(), p)]),
            generation_tps: Some(g),
            ..Default::default()
        }
    }

    #[test]
    fn ratios_are_taken_within_each_round() {
        let round = |ours: f64, native: f64, generic: Measured| -> Rows {
            vec![
                (PACKED_INT8, measured(1.0, ours)),
                (LLAMA_NATIVE, measured(1.0, native)),
                (LLAMA_GENERIC, generic),
            ]
        };
        let rounds = vec![
            round(10.0, 8.0, measured(1.0, 12.5)),
            round(20.0, 25.0, Measured::failed("x".into())),
            vec![(PACKED_INT8, measured(1.0, 30.0))],
            round(9.0, 10.0, measured(1.0, 9.0)),
        ];
        let r = round_ratios(&rounds);
        assert_eq!(r.len(), 1);
        assert_eq!(r[PACKED_INT8], vec![0.8, 0.8, 0.9]);
        assert_eq!(median(&r[PACKED_INT8]), 0.8);
        assert_eq!(median(&[1.0, 2.0]), 1.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn llama_bench_without_json_is_an_error() {
        let e = parse_llama_bench("build: x\nerror: failed to load model\n").unwrap_err();
        assert!(e.to_string().contains("no JSON"), "{e}");
    }

    #[test]
    fn names_how_a_run_ended() {
        assert_eq!(run_failure(ExitStatus::from_raw(0)), None);
        assert_eq!(
            run_failure(ExitStatus::from_raw(1 << 8)).as_deref(),
            Some("exited with status 1")
        );
        let ill = run_failure(ExitStatus::from_raw(4)).unwrap();
        assert!(ill.contains("signal 4") && ill.contains("SIGILL"), "{ill}");
        assert_eq!(
            run_failure(ExitStatus::from_raw(31)).as_deref(),
            Some("killed by signal 31")
        );
    }

    #[test]
    fn picks_the_builds_whose_binary_exists() {
        let spec = |label, given: Option<&'static str>, default: &str| BuildSpec {
            label,
            flag: "--flag",
            given: given.map(Path::new),
            default: PathBuf::from(default),
        };
        let builds = pick_builds(vec![
            spec(LLAMA_NATIVE, None, "/no/such/llama-bench"),
            spec(LLAMA_GENERIC, None, "/bin/sh"),
        ])
        .unwrap();
        assert_eq!(builds.len(), 1);
        assert_eq!(builds[0].label, LLAMA_GENERIC);
        assert_eq!(builds[0].bin, PathBuf::from("/bin/sh"));
        let builds = pick_builds(vec![
            spec(LLAMA_NATIVE, Some("/bin/sh"), "/no/such/llama-bench"),
            spec(LLAMA_GENERIC, None, "/bin/sh"),
        ])
        .unwrap();
        let labels: Vec<_> = builds.iter().map(|b| b.label).collect();
        assert_eq!(labels, [LLAMA_NATIVE, LLAMA_GENERIC]);
        let e = pick_builds(vec![spec(LLAMA_GENERIC, Some("/no/such/x"), "/bin/sh")]);
        assert!(e.is_err_and(|e| e.to_string().contains("--flag: no /no/such/x")));
    }

    #[test]
    fn a_failed_round_marks_its_row_failed() {
        let mut rows = Rows::new();
        keep_best(&mut rows, LLAMA_GENERIC, measured(10.0, 2.0));
        assert!(!row_failed(&rows, LLAMA_GENERIC));
        keep_best(
            &mut rows,
            LLAMA_GENERIC,
            Measured::failed("round 2: x".into()),
        );
        keep_best(
            &mut rows,
            LLAMA_GENERIC,
            Measured::failed("round 3: y".into()),
        );
        assert!(row_failed(&rows, LLAMA_GENERIC));
        assert!(!row_failed(&rows, LLAMA_NATIVE));
        assert_eq!(rows[0].1.failed.as_deref(), Some("round 2: x"));
        assert_eq!(rows[0].1.generation_tps, Some(2.0));
    }

    #[test]
    fn a_failed_row_shows_as_failed_and_has_no_ratio() {
        let lens = ["128".to_string()];
        let line = table_line(LLAMA_NATIVE, &measured(900.5, 150.25), &lens);
        assert_eq!(
            line,
            format!("{LLAMA_NATIVE:<24}{:>12}{:>14}", "900.5", "150.25")
        );
        let failed = Measured::failed("round 1: killed by signal 4 (SIGILL)".into());
        let line = table_line(LLAMA_GENERIC, &failed, &lens);
        assert_eq!(
            line,
            format!("{LLAMA_GENERIC:<24}failed (round 1: killed by signal 4 (SIGILL))")
        );
        let rows: Rows = vec![
            (PACKED, measured(100.0, 30.0)),
            (LLAMA_NATIVE, measured(50.0, 15.0)),
            (LLAMA_GENERIC, failed),
        ];
        let r = ratios(&rows);
        assert_eq!(r["packed_vs_llama_cpp_native"]["generation"], 2.0);
        assert!(!r.contains_key("packed_vs_llama_cpp_generic"));
        assert!(!r.contains_key("llama_cpp_native_vs_generic"));
    }

    #[test]
    fn failed_prompts_keep_the_generation_rate() {
        let lens = ["128".to_string()];
        let mut rows = Rows::new();
        let crashed = Measured {
            generation_tps: Some(15.0),
            prompt_failed: Some("round 1: killed by signal 11 (SIGSEGV)".into()),
            ..Default::default()
        };
        keep_best(&mut rows, LLAMA_NATIVE, crashed);
        keep_best(&mut rows, LLAMA_NATIVE, measured_gen(16.0));
        let native = &rows[0].1;
        assert_eq!(native.generation_tps, Some(16.0));
        assert!(native.prompt_failed.is_some());
        assert!(prompts_failed(&rows, LLAMA_NATIVE) && !prompts_failed(&rows, LLAMA_GENERIC));
        assert!(!row_failed(&rows, LLAMA_NATIVE));
        let line = table_line(LLAMA_NATIVE, native, &lens);
        assert_eq!(
            line,
            format!("{LLAMA_NATIVE:<24}{:>12}{:>14}", "failed", "16.00")
        );
        rows.push((PACKED, measured(100.0, 32.0)));
        let r = ratios(&rows);
        assert_eq!(r["packed_vs_llama_cpp_native"]["generation"], 2.0);
        assert!(!r["packed_vs_llama_cpp_native"].contains_key("prompt@128"));
    }

    fn measured_gen(g: f64) -> Measured {
        Measured {
            generation_tps: Some(g),
            ..Default::default()
        }
    }
}
