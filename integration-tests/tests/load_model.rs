//! LoadModel is all or nothing, over real gRPC and the real model: hostile checkpoints (bad
//! sizes in every config field a family reads, truncated weights, a broken tokenizer, a
//! symlink loop) each fail naming the problem while the model already loaded keeps answering
//! its golden; a good and a bad LoadModel racing end where each caller was told; Free and a
//! replacing LoadModel end running streams with ABORTED.

use std::path::{Path, PathBuf};
use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::goldens::{self, Goldens};
use integration_tests::rpc::{golden_request, load_fixture, stream_error};
use integration_tests::server::BackendProcess;
use integration_tests::{fixture, TestResult};
use tonic::transport::Channel;
use tonic::Code;

const MODEL: &str = "smollm2-135m-4bit";
const GOLDENS: &str = "smollm2-135m-4bit-f32";

/// A folder of links to a fixture's files, with `config.json` (and whatever `edit` writes)
/// of its own.
fn scratch(
    root: &Path,
    name: &str,
    from: &str,
    edit: impl FnOnce(&Path) -> TestResult,
) -> TestResult<PathBuf> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(fixture(from)?)? {
        let entry = entry?;
        if entry.file_name() != "config.json" {
            std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name()))?;
        }
    }
    std::fs::copy(fixture(from)?.join("config.json"), dir.join("config.json"))?;
    edit(&dir)?;
    Ok(dir)
}

/// Sets `field` of the folder's config.json to `value`.
fn set_field(field: &'static str, value: serde_json::Value) -> impl FnOnce(&Path) -> TestResult {
    move |dir| {
        let path = dir.join("config.json");
        let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        config[field] = value;
        std::fs::write(&path, serde_json::to_vec(&config)?)?;
        Ok(())
    }
}

/// Sets `field` of the config's `text_config` (a multimodal wrapper's text model).
fn set_text_field(
    field: &'static str,
    value: serde_json::Value,
) -> impl FnOnce(&Path) -> TestResult {
    move |dir| {
        let path = dir.join("config.json");
        let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        config["text_config"][field] = value;
        std::fs::write(&path, serde_json::to_vec(&config)?)?;
        Ok(())
    }
}

/// Replaces the link `file` with a real file holding `bytes`.
fn replace(file: &'static str, bytes: Vec<u8>) -> impl FnOnce(&Path) -> TestResult {
    move |dir| {
        std::fs::remove_file(dir.join(file))?;
        std::fs::write(dir.join(file), bytes)?;
        Ok(())
    }
}

/// The golden case still comes out word for word.
async fn answers_golden(c: &mut BackendClient<Channel>, g: &Goldens, when: &str) -> TestResult {
    let case = &g.cases[0];
    let reply = c
        .predict(golden_request(case, g.max_tokens))
        .await?
        .into_inner();
    // The text as generated: LocalAI's backends do not trim (its `trimspace` config does).
    assert_eq!(String::from_utf8(reply.message)?, case.text, "{when}");
    Ok(())
}

async fn load_dir(
    c: &mut BackendClient<Channel>,
    root: &Path,
    model: &str,
) -> TestResult<pb::Result> {
    let req = pb::ModelOptions {
        model: model.into(),
        model_path: root.to_string_lossy().into_owned(),
        ..Default::default()
    };
    Ok(c.load_model(req).await?.into_inner())
}

type Case = (
    &'static str,
    &'static str,
    Box<dyn FnOnce(&Path) -> TestResult>,
    &'static str,
);

/// The 2026 families' own fields: a missing `text_config`, a text model not supported yet,
/// windows and layer kinds that make no sense, an unknown family, a wrapper's bad size, gpt-oss's
/// layer kinds and experts per token.
fn family_cases() -> Vec<Case> {
    use serde_json::json;
    let sliding = json!([
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "x"
    ]);
    vec![
        (
            "tiny-kimi-k25",
            "no text_config",
            Box::new(set_field("text_config", json!(null))),
            "kimi_k25 without text_config",
        ),
        (
            "tiny-mistral3-mistral4",
            "rope_parameters has no number `llama_4_scaling_beta`",
            Box::new(set_text_field(
                "rope_parameters",
                json!({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                    "original_max_position_embeddings": 16}),
            )),
            "mistral3 over mistral4 without Llama 4 scaling",
        ),
        (
            "tiny-mistral3",
            "no sliding_window",
            Box::new(set_text_field("sliding_window", json!(null))),
            "sliding layers without a window",
        ),
        (
            "tiny-ministral3",
            "layer_types entry `x`",
            Box::new(set_field("layer_types", sliding)),
            "an unknown layer type",
        ),
        (
            "tiny-gemma3-text",
            "sliding_window is 0",
            Box::new(set_field("sliding_window", json!(0))),
            "a window of 0",
        ),
        (
            "tiny-gemma3",
            "hidden_size",
            Box::new(set_text_field("hidden_size", json!(0))),
            "a wrapper's hidden_size 0",
        ),
        (
            "tiny-glm4",
            "partial_rotary_factor",
            Box::new(set_field("partial_rotary_factor", json!(0.0))),
            "partial_rotary_factor 0",
        ),
        (
            "tiny-minimax",
            "rotary_dim is 33",
            Box::new(set_field("rotary_dim", json!(33))),
            "an odd rotary_dim",
        ),
        (
            "tiny-gpt-oss",
            "layer_types lists 3 layers",
            Box::new(set_field(
                "layer_types",
                json!(["sliding_attention", "full_attention", "sliding_attention"]),
            )),
            "gpt_oss layer_types that miss a layer",
        ),
        (
            "tiny-gpt-oss",
            "num_experts_per_tok is 9",
            Box::new(set_field("num_experts_per_tok", json!(9))),
            "more experts per token than gpt_oss has",
        ),
        (
            "tiny-llama3",
            "unsupported model_type `mamba`",
            Box::new(set_field("model_type", json!("mamba"))),
            "an unknown family",
        ),
    ]
}

/// Every config field a family reads, zero, negative, huge and inconsistent, plus broken files.
fn hostile_cases() -> TestResult<Vec<Case>> {
    use serde_json::json;
    let weights = std::fs::read(fixture("tiny-qwen3")?.join("model.safetensors"))?;
    let truncated = weights[..weights.len() / 2].to_vec();
    let mut cases: Vec<Case> = Vec::new();
    let sizes: &[(&str, &str)] = &[
        ("hidden_size", "hidden_size"),
        ("num_hidden_layers", "num_hidden_layers"),
        ("intermediate_size", "intermediate_size"),
        ("num_attention_heads", "num_attention_heads"),
        ("num_key_value_heads", "num_key_value_heads"),
        ("vocab_size", "vocab_size"),
    ];
    for family in ["tiny-llama3", "tiny-qwen2", "tiny-qwen3"] {
        for (field, named) in sizes {
            for value in [json!(0), json!(-1), json!(1_000_000_000)] {
                cases.push((family, named, Box::new(set_field(field, value)), field));
            }
        }
        cases.push((
            family,
            "rms_norm_eps",
            Box::new(set_field("rms_norm_eps", json!(0.0))),
            "rms_norm_eps",
        ));
        cases.push((
            family,
            "rope_theta",
            Box::new(set_field("rope_theta", json!(-1.0))),
            "rope_theta",
        ));
        cases.push((
            family,
            "num_key_value_heads",
            Box::new(set_field("num_key_value_heads", json!(3))),
            "kv heads 3",
        ));
    }
    cases.push((
        "tiny-qwen3",
        "head_dim",
        Box::new(set_field("head_dim", json!(0))),
        "head_dim 0",
    ));
    cases.push((
        "tiny-qwen2",
        "num_attention_heads",
        Box::new(set_field("num_attention_heads", json!(5))),
        "heads not dividing hidden",
    ));
    // Quantization formats no kernel has: the whole checkpoint's, and one layer's override.
    let mut q = json!({"group_size": 64, "bits": 7});
    cases.push((
        MODEL,
        "7 bits",
        Box::new(set_field("quantization", q.clone())),
        "bits 7",
    ));
    q["bits"] = json!(4);
    q["model.layers.3.mlp.down_proj"] = json!({"group_size": 48, "bits": 4});
    cases.push((
        MODEL,
        "layer `model.layers.3.mlp.down_proj`: unsupported quantization: mode affine with 4 bits and group size 48",
        Box::new(set_field("quantization", q)),
        "a layer's group 48",
    ));
    // A float mode at another group size; an affine checkpoint that config.json calls mxfp4.
    let float_mode = json!({"mode": "mxfp4", "group_size": 64, "bits": 4});
    cases.push((
        MODEL,
        "mxfp4 takes group size 32 and 4 bits, not group size 64",
        Box::new(set_field("quantization", float_mode)),
        "mxfp4 at group 64",
    ));
    cases.push((
        MODEL,
        "scales` is Bfloat16, but mxfp4 scales are uint8",
        Box::new(set_field("quantization", json!({"mode": "mxfp4"}))),
        "affine scales called mxfp4",
    ));
    cases.push((
        "tiny-qwen3",
        "model.safetensors",
        Box::new(replace("model.safetensors", truncated)),
        "truncated weights",
    ));
    cases.extend(family_cases());
    cases.push((
        "tiny-qwen3",
        "tokenizer",
        Box::new(replace("tokenizer.json", b"{not json".to_vec())),
        "broken tokenizer",
    ));
    Ok(cases)
}

#[tokio::test]
async fn hostile_checkpoints_fail_by_name_and_the_loaded_model_keeps_serving() -> TestResult {
    let g = goldens::load(GOLDENS)?;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    answers_golden(&mut c, &g, "before").await?;
    let root = std::env::temp_dir().join(format!("mlxd-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (i, (family, named, edit, what)) in hostile_cases()?.into_iter().enumerate() {
        let name = format!("case{i}");
        scratch(&root, &name, family, edit)?;
        let reply =
            tokio::time::timeout(Duration::from_secs(60), load_dir(&mut c, &root, &name)).await??;
        assert!(!reply.success, "{family} {what}: {reply:?}");
        assert!(
            reply.message.contains(named),
            "{family} {what}: {}",
            reply.message
        );
    }
    std::os::unix::fs::symlink(root.join("loop"), root.join("loop"))?;
    let reply = load_dir(&mut c, &root, "loop").await?;
    assert!(
        !reply.success && reply.message.contains("symbolic links"),
        "{reply:?}"
    );
    let huge = format!("hostfile:/{}", "a".repeat(1 << 20));
    let reply = load_fixture(&mut c, MODEL, &[&huge]).await?;
    assert!(
        !reply.success && reply.message.len() < 1000,
        "{}",
        reply.message.chars().take(300).collect::<String>()
    );
    answers_golden(&mut c, &g, "after every hostile load").await?;
    let health = c.health(pb::HealthMessage {}).await?.into_inner();
    assert_eq!(health.message, b"OK");
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// A good and a bad LoadModel at once: each caller hears the truth, and the good model serves.
#[tokio::test]
async fn racing_good_and_bad_loads_end_as_each_caller_was_told() -> TestResult {
    let g = goldens::load(GOLDENS)?;
    let server = BackendProcess::start(&[]).await?;
    let c = server.client().await?;
    for round in 0..3 {
        let (mut good, mut bad) = (c.clone(), c.clone());
        let missing = pb::ModelOptions {
            model: "/nonexistent/model/folder".into(),
            ..Default::default()
        };
        let (ok, failed) = tokio::join!(load_fixture(&mut good, MODEL, &[]), async move {
            Ok::<_, tonic::Status>(bad.load_model(missing).await?.into_inner())
        });
        let (ok, failed) = (ok?, failed?);
        assert!(ok.success, "round {round}: {ok:?}");
        assert!(
            !failed.success && failed.message.contains("nonexistent"),
            "round {round}: {failed:?}"
        );
        answers_golden(&mut c.clone(), &g, &format!("round {round}")).await?;
    }
    Ok(())
}

/// Free, and a LoadModel that replaces the model, end the running streams with ABORTED.
#[tokio::test]
async fn free_and_replacing_load_abort_running_streams() -> TestResult {
    let g = goldens::load(GOLDENS)?;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let long = pb::PredictOptions {
        tokens: 2000,
        ignore_eos: true,
        ..golden_request(&g.cases[0], 0)
    };
    for (what, message) in [("LoadModel", "replaced"), ("Free", "freed")] {
        assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
        let mut stream = c.predict_stream(long.clone()).await?.into_inner();
        stream.message().await?;
        let mut other = c.clone();
        let call = async move {
            match what {
                "Free" => other.free(pb::HealthMessage {}).await.map(|_| ()),
                _ => load_fixture(&mut other, MODEL, &[])
                    .await
                    .map(|_| ())
                    .map_err(|e| tonic::Status::internal(e.to_string())),
            }
        };
        let (ended, called) =
            tokio::join!(stream_error(&mut stream, Duration::from_secs(60)), call);
        called?;
        let ended = ended?;
        assert_eq!(ended.code(), Code::Aborted, "{what}: {ended:?}");
        assert!(ended.message().contains(message), "{what}: {ended:?}");
    }
    Ok(())
}

/// Over a 2-rank pipeline, a LoadModel that fails on every rank (truncated weights) or on a
/// config check leaves both ranks serving the old model: workers build beside it and drop the
/// new part on `Abort`.
#[tokio::test]
async fn a_failed_load_over_a_cluster_leaves_every_rank_serving() -> TestResult {
    use serde_json::json;
    let g = goldens::load(GOLDENS)?;
    let cluster = Cluster::start(2, "load-txn")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    answers_golden(&mut c, &g, "cluster, before").await?;
    let root = std::env::temp_dir().join(format!("mlxd-load-txn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let weights = std::fs::read(fixture("tiny-qwen3")?.join("model.safetensors"))?;
    let truncated = weights[..weights.len() / 2].to_vec();
    scratch(
        &root,
        "truncated",
        "tiny-qwen3",
        replace("model.safetensors", truncated),
    )?;
    scratch(
        &root,
        "no-heads",
        "tiny-llama3",
        set_field("num_attention_heads", json!(0)),
    )?;
    for (name, named) in [
        ("truncated", "model.safetensors"),
        ("no-heads", "num_attention_heads"),
    ] {
        let load = load_dir(&mut c, &root, name);
        let reply = tokio::time::timeout(Duration::from_secs(120), load).await??;
        assert!(
            !reply.success && reply.message.contains(named),
            "{name}: {reply:?}"
        );
        answers_golden(&mut c, &g, &format!("cluster, after {name}")).await?;
    }
    let health = c.health(pb::HealthMessage {}).await?.into_inner();
    assert_eq!(health.message, b"OK");
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// Bytes of a fixture's safetensors files.
fn checkpoint_bytes(name: &str) -> TestResult<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(fixture(name)?)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            bytes += std::fs::metadata(&path)?.len();
        }
    }
    Ok(bytes)
}

/// On CPU quantized checkpoints stay packed by default: after LoadModel, before any KV, the
/// backend's resident memory is at most 1.25x the checkpoint plus 64 MB, and Status reports
/// the weight bytes it holds.
#[tokio::test]
async fn resident_memory_after_load_stays_near_the_checkpoint() -> TestResult {
    for name in ["smollm2-135m-4bit", "smollm2-135m-8bit"] {
        let server = BackendProcess::start(&[]).await?;
        let mut c = server.client().await?;
        let loaded = load_fixture(&mut c, name, &[]).await?;
        assert!(loaded.success, "{name}: {loaded:?}");
        let checkpoint = checkpoint_bytes(name)?;
        let status = c.status(pb::HealthMessage {}).await?.into_inner();
        let memory = status.memory.ok_or("Status has no memory")?;
        let (rss, weights) = (memory.breakdown["rss"], memory.breakdown["weight_bytes"]);
        let limit = checkpoint * 5 / 4 + (64 << 20);
        eprintln!(
            "{name}: checkpoint {} MB, weights {} MB, resident {} MB (limit {} MB)",
            checkpoint >> 20,
            weights >> 20,
            rss >> 20,
            limit >> 20
        );
        assert!(rss <= limit, "{name}: resident {rss} B above {limit} B");
        assert!(
            weights > checkpoint / 2 && weights <= checkpoint * 5 / 4,
            "{name}: weight_bytes {weights} for a {checkpoint} B checkpoint"
        );
    }
    Ok(())
}

/// A format without a vector kernel here is never a silent slow path: with the portable kernels
/// forced (as on a CPU without AVX2), Status counts the layers that run them, and the answer
/// still starts as the golden (a few tokens: the portable kernels are slow).
#[tokio::test]
async fn layers_on_the_portable_kernel_are_reported() -> TestResult {
    let g = goldens::load(GOLDENS)?;
    let server = BackendProcess::start(&[("MLX_DISTRIBUTED_QUANT_KERNELS", "portable")]).await?;
    let mut c = server.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    let memory = status.memory.ok_or("Status has no memory")?;
    // 30 layers of 7 products, and the tied embedding.
    assert_eq!(memory.breakdown["portable_kernel_layers"], 30 * 7 + 1);
    let case = &g.cases[0];
    let reply = c.predict(golden_request(case, 4)).await?.into_inner();
    let text = String::from_utf8(reply.message)?;
    assert!(
        case.text.starts_with(&text) && !text.trim().is_empty(),
        "{text:?} does not start {:?}",
        case.text
    );
    Ok(())
}

/// A layer whose declared shape the one-node decode layer does not take is never a silent slow
/// path: Status counts the layers that decode op by op (none of a dense llama's; the two
/// sparse layers of tiny-qwen3-moe, whose dense middle layer the node takes; every layer of
/// tiny-gpt-oss, whose sinks the node does not compute).
#[tokio::test]
async fn layers_that_decode_op_by_op_are_reported() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    for (model, op_by_op) in [(MODEL, 0), ("tiny-qwen3-moe-4bit", 2), ("tiny-gpt-oss", 4)] {
        assert!(load_fixture(&mut c, model, &[]).await?.success, "{model}");
        let status = c.status(pb::HealthMessage {}).await?.into_inner();
        let memory = status.memory.ok_or("Status has no memory")?;
        assert_eq!(memory.breakdown["op_by_op_layers"], op_by_op, "{model}");
    }
    Ok(())
}

/// A multimodal checkpoint serves its text model: Status says so, and a request that carries
/// images is refused naming the field, never answered as if they were not there.
#[tokio::test]
async fn a_multimodal_checkpoint_serves_its_text_model_alone() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    assert!(load_fixture(&mut c, "tiny-gemma3", &[]).await?.success);
    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    let memory = status.memory.ok_or("no memory in Status")?;
    assert_eq!(memory.breakdown.get("text_only"), Some(&1), "{memory:?}");
    let with_image = pb::PredictOptions {
        prompt: "What is in this picture?".into(),
        tokens: 4,
        images: vec!["aGVsbG8=".into()],
        ..Default::default()
    };
    let err = c
        .predict(with_image)
        .await
        .expect_err("an image is refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("Images"), "{err:?}");
    // Sliding-window layers keep no quantized cache (mlx-lm's rotating cache cannot either).
    let quantized_kv = load_fixture(&mut c, "tiny-gemma3-text", &["kv_bits:8"]).await?;
    assert!(
        !quantized_kv.success && quantized_kv.message.contains("sliding-window"),
        "{quantized_kv:?}"
    );
    assert!(load_fixture(&mut c, "tiny-gemma3-text", &[]).await?.success);
    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    let memory = status.memory.ok_or("no memory in Status")?;
    assert_eq!(memory.breakdown.get("text_only"), Some(&0), "{memory:?}");
    Ok(())
}
