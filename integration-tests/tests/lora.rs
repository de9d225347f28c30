//! LoRA adapters against mlx-lm (`mlx_lm.load(..., adapter_path=...)`, whose run-time
//! `LoRALinear` layers are the oracle): mlx-lm's format and PEFT's, one at a time and two at
//! once with scales, fused into dense weights and added at run time, on a tiny random llama
//! and on SmolLM2 (f32, and 4-bit where the update always runs beside the packed kernels).
//! Then LocalAI's fields over gRPC: adapters under the model path, the same text on one node,
//! a tensor split and a pipeline, and every adapter the model cannot take refused by name.

use std::collections::HashMap;
use std::path::PathBuf;

use backend::cache::{KvCache, LayerCache};
use backend::grpc::pb::{self, backend_client::BackendClient};
use backend::loader::{self, LoadedModel, Recipe};
use backend::lora::{AdapterPlan, AdapterSpec, Merge};
use backend::source::Lookup;
use backend::weights::WeightMode;
use integration_tests::cluster::{Cluster, TempDir};
use integration_tests::goldens::greedy_tokens;
use integration_tests::rpc::stream_text;
use integration_tests::server::BackendProcess;
use integration_tests::{fixture, TestResult};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype};
use serde::Deserialize;
use tonic::transport::Channel;

/// Same MLX ops on f32 weights: only summation order (and, fused, rounding of `W + BA`) differ.
const LOGIT_TOLERANCE: f32 = 1e-4;
/// The integer path's: two int8 digits per activation moved the adapted SmolLM2's logits by
/// 0.04 at most, 2.5 times under this.
const INT8_LOGIT_TOLERANCE: f32 = 0.1;

/// One server or cluster at a time (an async lock, held across awaits).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    model: String,
    adapters: Vec<AdapterRef>,
    prompt_ids: Vec<u32>,
    tokens: Vec<u32>,
    last_logits: Vec<f32>,
    #[serde(default)]
    tokens_without: Option<Vec<u32>>,
}

#[derive(Debug, Deserialize)]
struct AdapterRef {
    folder: String,
    scale: f32,
}

fn adapters_dir() -> TestResult<PathBuf> {
    fixture("adapters")
}

fn case(name: &str) -> TestResult<Case> {
    let text = std::fs::read_to_string(adapters_dir()?.join("goldens.json"))?;
    let doc: serde_json::Value = serde_json::from_str(&text)?;
    let cases: Vec<Case> = serde_json::from_value(doc["cases"].clone())?;
    cases
        .into_iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("no case `{name}` in adapters/goldens.json").into())
}

fn plan(case: &Case, merge: Merge) -> TestResult<AdapterPlan> {
    let adapters = case
        .adapters
        .iter()
        .map(|a| {
            Ok(AdapterSpec {
                name: adapters_dir()?
                    .join(&a.folder)
                    .to_string_lossy()
                    .into_owned(),
                scale: a.scale,
            })
        })
        .collect::<TestResult<_>>()?;
    Ok(AdapterPlan { adapters, merge })
}

fn load(case: &Case, model: &str, mode: WeightMode, merge: Merge) -> TestResult<LoadedModel> {
    let adapters = backend::source::resolve_adapters(&plan(case, merge)?, &Lookup::default())?;
    let recipe = Recipe {
        mode,
        adapters: &adapters,
    };
    Ok(loader::load_adapted(
        &fixture(model)?,
        recipe,
        Default::default(),
    )?)
}

/// The largest |logit - mlx-lm's| at the prompt's last position, and the greedy tokens.
fn run(m: &LoadedModel, case: &Case) -> TestResult<(f32, Vec<u32>)> {
    let mut caches: Vec<_> = (0..m.model.num_layers())
        .map(|_| LayerCache::Kv(KvCache::new()))
        .collect();
    let ids = &case.prompt_ids;
    let input = Array::from_slice(ids, &[1, ids.len() as i32]);
    let logits = m.model.forward(&input, &mut caches)?;
    let last = logits.index((0, -1, ..)).as_dtype(Dtype::Float32)?;
    last.eval()?;
    let worst = (last.as_slice::<f32>().iter())
        .zip(&case.last_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let tokens = greedy_tokens(m, ids, case.tokens.len())?;
    Ok((worst, tokens))
}

/// mlx-lm's adapter, PEFT's, and both at once (scales 0.5 and 1.5), fused and at run time:
/// mlx-lm's logits within 1e-4 and its greedy tokens; without them the logits are far off.
#[test]
fn tiny_adapters_in_both_formats_and_together_give_mlx_lm_logits() -> TestResult {
    let plain = case("tiny-none")?;
    for name in ["tiny-mlx", "tiny-peft", "tiny-both"] {
        let c = case(name)?;
        for merge in [Merge::Fuse, Merge::RunTime] {
            let m = load(&c, &c.model, WeightMode::AsStored, merge)?;
            let (worst, tokens) = run(&m, &c)?;
            println!("{name} {merge:?}: max |logit - mlx-lm| = {worst:.2e}");
            assert!(worst <= LOGIT_TOLERANCE, "{name} {merge:?}: {worst}");
            assert_eq!(tokens, c.tokens, "{name} {merge:?}: greedy tokens");
        }
        let changed = (plain.last_logits.iter())
            .zip(&c.last_logits)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(changed > 0.1, "{name} changes the logits by only {changed}");
    }
    Ok(())
}

/// SmolLM2 with an adapter on its last 8 layers: fused into the f32 model, at run time on it,
/// and at run time beside the 4-bit model's packed kernels (whose numerics are the f32
/// twin's): mlx-lm's greedy tokens each time, which differ from the model's own.
#[test]
fn smollm2_adapter_fused_and_beside_packed_4bit_weights() -> TestResult {
    let c = case("smollm2")?;
    let runs = [
        ("smollm2-135m-4bit-f32", Merge::Fuse),
        ("smollm2-135m-4bit-f32", Merge::RunTime),
        ("smollm2-135m-4bit", Merge::Fuse),
    ];
    for (model, merge) in runs {
        let m = load(&c, model, WeightMode::default_for_device(), merge)?;
        let (worst, tokens) = run(&m, &c)?;
        println!("{model} {merge:?}: max |logit - mlx-lm| = {worst:.2e}");
        assert!(worst <= LOGIT_TOLERANCE, "{model} {merge:?}: {worst}");
        assert_eq!(tokens, c.tokens, "{model} {merge:?}: greedy tokens");
    }
    assert_ne!(Some(&c.tokens), c.tokens_without.as_ref());
    Ok(())
}

/// The same adapter beside the 4-bit model's packed weights on the integer path (the CPU
/// default), at run time and as asked to fuse: its products stay f32 beside the integer base
/// product, the logits stay near mlx-lm's and the greedy tokens are mlx-lm's.
#[test]
fn smollm2_adapter_beside_packed_4bit_weights_in_int8() -> TestResult {
    let c = case("smollm2")?;
    for merge in [Merge::RunTime, Merge::Fuse] {
        let m = load(&c, "smollm2-135m-4bit", WeightMode::PackedInt8, merge)?;
        let (worst, tokens) = run(&m, &c)?;
        println!("int8 {merge:?}: max |logit - mlx-lm| = {worst:.2e}");
        assert!(worst <= INT8_LOGIT_TOLERANCE, "int8 {merge:?}: {worst}");
        assert_eq!(tokens, c.tokens, "int8 {merge:?}: greedy tokens");
    }
    Ok(())
}

/// LocalAI's fields: `LoraAdapters` relative to the model path with `LoraScales`, and
/// `LoraAdapter` with `LoraScale`.
fn tiny_both_request(options: &[&str]) -> TestResult<pb::ModelOptions> {
    Ok(pb::ModelOptions {
        model: "tiny-llama3".into(),
        model_path: fixture("tiny-llama3")?
            .parent()
            .ok_or("no fixtures folder")?
            .to_string_lossy()
            .into_owned(),
        lora_adapter: "adapters/tiny-llama3-mlx".into(),
        lora_scale: 0.5,
        lora_adapters: vec!["adapters/tiny-llama3-peft".into()],
        lora_scales: vec![1.5],
        options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
}

/// 16 greedy tokens of the tiny goldens' prompt.
fn tiny_request() -> TestResult<pb::PredictOptions> {
    let golden = case("tiny-both")?;
    let tok = backend::tokenizer::Tokenizer::load(&fixture("tiny-llama3")?)?;
    Ok(pb::PredictOptions {
        prompt: tok.decode(&golden.prompt_ids)?,
        tokens: golden.tokens.len() as i32,
        ignore_eos: true,
        temperature: 0.0,
        ..Default::default()
    })
}

/// The text of `tiny_request` once the two adapters are loaded with `options`.
async fn tiny_text(c: &mut BackendClient<Channel>, options: &[&str]) -> TestResult<String> {
    let reply = c
        .load_model(tiny_both_request(options)?)
        .await?
        .into_inner();
    assert!(reply.success, "{options:?}: {reply:?}");
    let req = tiny_request()?;
    Ok(stream_text(c, req).await?.0)
}

/// The two adapters through LocalAI's fields give one text on one node (fused and at run
/// time), on a 2-rank tensor split (each rank's cut of every update) and a 2-rank pipeline.
#[tokio::test]
async fn localai_fields_give_one_text_on_one_node_a_tensor_split_and_a_pipeline() -> TestResult {
    let _serial = SERIAL.lock().await;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let text = tiny_text(&mut c, &[]).await?;
    assert_eq!(
        tiny_text(&mut c, &["fuse:false"]).await?,
        text,
        "at run time"
    );
    drop(server);
    for (parallelism, fuse) in [
        ("parallelism:tensor", "fuse:true"),
        ("parallelism:tensor", "fuse:false"),
        ("parallelism:pipeline", "fuse:true"),
    ] {
        let cluster = Cluster::start(2, "lora-2")?;
        let rank0 = cluster.rank0(&[]).await?;
        let mut c = rank0.client().await?;
        let theirs = tiny_text(&mut c, &[parallelism, fuse]).await?;
        assert_eq!(theirs, text, "{parallelism} {fuse}");
    }
    Ok(())
}

/// A scratch adapter in mlx-lm's format: `layers` maps a layer name to its `(in, out)`.
fn scratch_adapter(
    dir: &TempDir,
    name: &str,
    config: &str,
    layers: &[(&str, (i32, i32))],
) -> TestResult<String> {
    let folder = dir.0.join(name);
    std::fs::create_dir_all(&folder)?;
    std::fs::write(folder.join("adapter_config.json"), config)?;
    let mut arrays = HashMap::new();
    for (layer, (i, o)) in layers {
        arrays.insert(
            format!("{layer}.lora_a"),
            mlx_rs::ops::zeros::<f32>(&[*i, 2])?,
        );
        arrays.insert(
            format!("{layer}.lora_b"),
            mlx_rs::ops::zeros::<f32>(&[2, *o])?,
        );
    }
    Array::save_safetensors(arrays, None, folder.join("adapters.safetensors"))?;
    Ok(folder.to_string_lossy().into_owned())
}

async fn refusal(c: &mut BackendClient<Channel>, req: pb::ModelOptions) -> TestResult<String> {
    let reply = c.load_model(req).await?.into_inner();
    assert!(!reply.success, "loaded: {reply:?}");
    Ok(reply.message)
}

/// Every adapter the model cannot take fails LoadModel with a message naming why, and the
/// model loaded before keeps serving.
#[tokio::test]
async fn adapters_the_model_cannot_take_are_refused_by_name() -> TestResult {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new("lora-refusals")?;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let before = tiny_text(&mut c, &[]).await?;
    let lora = r#"{"lora_parameters": {"rank": 2, "scale": 1.0}}"#;
    let embed = scratch_adapter(&dir, "embed", lora, &[("model.embed_tokens", (49152, 64))])?;
    let dora = scratch_adapter(
        &dir,
        "dora",
        r#"{"fine_tune_type": "dora", "lora_parameters": {"rank": 2, "scale": 1.0}}"#,
        &[],
    )?;
    let shape = scratch_adapter(
        &dir,
        "shape",
        lora,
        &[("model.layers.0.mlp.up_proj", (64, 100))],
    )?;
    let no_scale = scratch_adapter(&dir, "no-scale", r#"{"lora_parameters": {"rank": 2}}"#, &[])?;
    let smol = adapters_dir()?
        .join("smollm2-mlx")
        .to_string_lossy()
        .into_owned();
    let with = |name: &str| -> TestResult<pb::ModelOptions> {
        Ok(pb::ModelOptions {
            model: fixture("tiny-llama3")?.to_string_lossy().into_owned(),
            lora_adapter: name.into(),
            ..Default::default()
        })
    };
    let expect = [
        (
            with(&embed)?,
            "match no linear layer of the model: `model.embed_tokens`",
        ),
        (with(&dora)?, "DoRA"),
        (with(&no_scale)?, "lora_parameters.scale"),
        (with(&smol)?, "`model.layers.22.mlp.down_proj`"),
        (with(&shape)?, "maps 64 inputs to 100 outputs"),
        (
            with("no-such-adapter")?,
            "LoRA adapter `no-such-adapter` is neither",
        ),
        (
            pb::ModelOptions {
                lora_base: "base".into(),
                ..with(&smol)?
            },
            "LoraBase",
        ),
        (
            pb::ModelOptions {
                lora_adapters: vec![smol.clone()],
                lora_scales: vec![1.0, 2.0],
                ..with("")?
            },
            "LoraScales has 2 values",
        ),
        (
            pb::ModelOptions {
                options: vec!["fuse:false".into()],
                ..with("")?
            },
            "`fuse`",
        ),
    ];
    for (req, named) in expect {
        let message = refusal(&mut c, req).await?;
        assert!(message.contains(named), "expected {named:?} in: {message}");
    }
    let req = tiny_request()?;
    assert_eq!(
        stream_text(&mut c, req).await?.0,
        before,
        "the loaded model keeps serving"
    );
    Ok(())
}
