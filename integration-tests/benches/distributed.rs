//! Distributed decode benchmark on loopback: 1 node, 2- and 3-rank pipeline, 2- and 3-rank
//! tensor, 2-rank expert (mixtures of experts), each a real cluster (rank 0 = the backend
//! binary, workers = `worker mlx-distributed`). `DIST_BENCH_MODEL` (a model folder, default the
//! 4-bit SmolLM2 fixture) and `DIST_BENCH_MLX_LM_MODEL` (its f32 twin) pick another model.
//! Prints a table and a JSON line; ratios are against the single node measured in this run.
//! The per-step overhead (distributed minus single-node time per token) is what the
//! control plan, the activation hand-off and the extra synchronisation cost.
//! mlx-lm runs the same modes where it has them (tensor: `model.shard`; it has no pipeline
//! for llama) under `mlx.launch --backend ring`, on the f32 twin of the checkpoint, which is
//! what our fast mode computes with.

use std::process::Command;
use std::time::Duration;

use backend::grpc::pb;
use integration_tests::cluster::Cluster;
use integration_tests::server::BackendProcess;
use integration_tests::{fixture, free_port, mlx_lm, TestResult};

/// The model folder: `DIST_BENCH_MODEL`, or the 4-bit fixture.
fn model() -> TestResult<String> {
    Ok(match std::env::var("DIST_BENCH_MODEL") {
        Ok(path) => path,
        Err(_) => fixture("smollm2-135m-4bit")?.display().to_string(),
    })
}

/// What our default mode computes with, for mlx-lm: `DIST_BENCH_MLX_LM_MODEL`, or the f32 twin.
fn mlx_lm_model() -> TestResult<std::path::PathBuf> {
    Ok(match std::env::var("DIST_BENCH_MLX_LM_MODEL") {
        Ok(path) => path.into(),
        Err(_) => fixture("smollm2-135m-4bit-f32")?,
    })
}
const TOKENS: i32 = 128;
const RUNS: usize = 3;

/// Tokens to decode: fewer for tensor and expert modes, whose every layer waits on two
/// all_sums over ranks that share 2 cores here (about 1 tok/s, for mlx-lm too).
fn tokens(ranks: usize, mode: &str) -> i32 {
    match (ranks, mode) {
        (1, _) | (_, "pipeline") => TOKENS,
        _ => TOKENS / 4,
    }
}

type Client = pb::backend_client::BackendClient<tonic::transport::Channel>;

/// Decode tok/s of one greedy run that never stops early.
async fn decode_once(c: &mut Client, tokens: i32) -> TestResult<f64> {
    let req = pb::PredictOptions {
        prompt: "Write a story about the sea.".into(),
        tokens,
        ignore_eos: true,
        ..Default::default()
    };
    let r = c.predict(req).await?.into_inner();
    Ok(r.tokens as f64 / (r.timing_token_generation / 1000.0))
}

/// A loaded backend: rank 0 of a cluster of `ranks` (1 = a single node).
async fn start(ranks: usize, options: &[&str]) -> TestResult<(Cluster, BackendProcess, Client)> {
    let cluster = Cluster::start(ranks, &format!("bench{ranks}"))?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    let req = pb::ModelOptions {
        model: model()?,
        options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let loaded = c.load_model(req).await?.into_inner();
    if !loaded.success {
        return Err(loaded.message.into());
    }
    Ok((cluster, rank0, c))
}

/// Best tok/s of the single node and of a cluster, their runs alternating so that drift in
/// the machine's speed hits both alike.
async fn measure(single: &mut Client, ranks: usize, options: &[&str]) -> TestResult<(f64, f64)> {
    let mode = options
        .iter()
        .find_map(|o| o.strip_prefix("parallelism:"))
        .unwrap_or("pipeline");
    let (_cluster, _rank0, mut c) = start(ranks, options).await?;
    let n = tokens(ranks, mode);
    let runs = if n == TOKENS { RUNS } else { 1 };
    let (mut one, mut many) = (0f64, 0f64);
    for _ in 0..runs {
        one = one.max(decode_once(single, TOKENS).await?);
        many = many.max(decode_once(&mut c, n).await?);
    }
    Ok((one, many))
}

/// mlx-lm's decode tok/s on one node, or sharded over `ranks` ranks by `mlx.launch`.
fn mlx_lm_speed(ranks: usize, sharded: &str) -> TestResult<f64> {
    let venv = mlx_lm::venv_bin();
    let mut cmd = match ranks {
        1 => Command::new(venv.join("python")),
        _ => {
            let mut c = Command::new(venv.join("mlx.launch"));
            c.args(["--backend", "ring", "--hosts", "127.0.0.1", "-n"])
                .arg(ranks.to_string())
                .args(["--starting-port", &free_port()?.to_string()])
                .args(["--env", &format!("LD_PRELOAD={}", mlx_lm::OPENBLAS)])
                .arg(venv.join("python"));
            c
        }
    };
    cmd.arg(mlx_lm::script("mlx_lm_engine.py"))
        .arg("--model")
        .arg(mlx_lm_model()?)
        .args([
            "--prompt-lens",
            "",
            "--gen-tokens",
            &tokens(ranks, sharded).to_string(),
        ]);
    if ranks > 1 {
        cmd.args(["--sharded", sharded]);
    }
    let v = mlx_lm::json_output(cmd, Duration::from_secs(300))?;
    v["generation_tps"]
        .as_f64()
        .ok_or_else(|| format!("mlx-lm printed no generation_tps: {v}").into())
}

fn main() -> TestResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // DIST_BENCH_MODES picks some of: pipeline-2, pipeline-3, tensor-2, tensor-3, expert-2,
    // mlx-lm.
    let only = std::env::var("DIST_BENCH_MODES").unwrap_or_default();
    let wanted = |m: &str| only.is_empty() || only.split(',').any(|x| x == m);
    let run = async {
        let (_none, _single_proc, mut single) = start(1, &[]).await?;
        let modes: [(&str, usize, &[&str]); 5] = [
            ("pipeline-2", 2, &[]),
            ("pipeline-3", 3, &[]),
            ("tensor-2", 2, &["parallelism:tensor"]),
            ("tensor-3", 3, &["parallelism:tensor"]),
            ("expert-2", 2, &["parallelism:expert"]),
        ];
        println!(
            "{:<12} {:>9} {:>12} {:>8} {:>16}",
            "mode", "tok/s", "single tok/s", "ratio", "overhead ms/step"
        );
        let mut json = serde_json::json!({"model": model()?, "tokens": TOKENS});
        for (name, ranks, options) in modes.into_iter().filter(|m| wanted(m.0)) {
            let (one, speed) = measure(&mut single, ranks, options).await?;
            let overhead = 1000.0 / speed - 1000.0 / one;
            println!(
                "{name:<12} {speed:>9.2} {one:>12.2} {:>8.2} {overhead:>16.2}",
                speed / one
            );
            json[name] = serde_json::json!({"tok_s": speed, "single_tok_s": one, "ratio": speed / one, "overhead_ms": overhead});
        }
        if wanted("mlx-lm") {
            let lm_single = mlx_lm_speed(1, "")?;
            let lm_tensor = mlx_lm_speed(3, "tensor")?;
            println!(
                "mlx-lm (f32 twin, same BLAS): single {lm_single:.2} tok/s, tensor-3 \
                 {lm_tensor:.2} tok/s; it has no pipeline mode for llama"
            );
            json["mlx_lm"] = serde_json::json!({"single": lm_single, "tensor-3": lm_tensor});
        }
        println!("{json}");
        TestResult::Ok(())
    };
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(1200), run).await })
        .map_err(|_| "the benchmark did not finish within 20 minutes")?
}
