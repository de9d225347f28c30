//! What one request echoes and keeps is bounded, and bad values are refused by name (issue
//! #47): a 20 MB `ModelIdentity` comes back as NOT_FOUND in under 1 KiB, ten of them leave
//! `/status.json` small and the process's memory where it was; media fields, out-of-range
//! time and integer options, a `kv_bits` conflict, `LoraBase`, non-finite or integer LoRA
//! factors, a corrupt adapter (MLX's text without a Rust location), deep YAML and floods of
//! unknown options each get a clear refusal, and the golden answer and Health stay true.
//! Real backend processes, real MLX, the smollm2 fixture, gRPC and HTTP on loopback only.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::TempDir;
use integration_tests::rpc::{answers_first_golden, connect_within, load_fixture};
use integration_tests::server::{workspace_binary, BackendProcess};
use integration_tests::{fixture, free_port, wait_bounded, TestResult};
use mlx_rs::Array;
use tonic::transport::Channel;
use tonic::Code;

const MODEL: &str = "smollm2-135m-4bit";
const GOLDENS: &str = "smollm2-135m-4bit-f32";
/// The most a status or result message may carry (the backend's `error::MESSAGE_LIMIT`).
const MESSAGE_LIMIT: usize = 1024;

/// One backend test at a time: each runs a model on a 2-core box shared with others.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The process's resident memory in bytes, from /proc.
fn rss(pid: u32) -> TestResult<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or("no VmRSS")?;
    Ok(kb * 1024)
}

use integration_tests::http_get as get;

fn hello() -> pb::PredictOptions {
    pb::PredictOptions {
        prompt: "Hello".into(),
        tokens: 4,
        ..Default::default()
    }
}

/// The golden answer within 30 s, and Health "OK".
async fn still_serving(c: &mut BackendClient<Channel>) -> TestResult {
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), answers_first_golden(c, GOLDENS)).await??;
    assert!(started.elapsed() < Duration::from_secs(30));
    let health = c.health(pb::HealthMessage {}).await?.into_inner();
    assert_eq!(String::from_utf8(health.message)?, "OK");
    Ok(())
}

/// Ten 20 MB identities: each NOT_FOUND with a short message naming the mismatch; then RSS
/// back within 64 MiB of before, `/status.json` small, media fields refused by name, and the
/// golden answer and Health unchanged.
#[tokio::test]
async fn huge_identities_are_not_echoed_or_kept() -> TestResult {
    let _serial = SERIAL.lock().await;
    let mut server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let port = free_port()?;
    let metrics = format!("metrics_addr:127.0.0.1:{port}");
    assert!(load_fixture(&mut c, MODEL, &[&metrics]).await?.success);
    still_serving(&mut c).await?;
    let before = rss(server.pid())?;
    let identity = "x".repeat(20 << 20);
    for _ in 0..10 {
        let req = pb::PredictOptions {
            model_identity: identity.clone(),
            ..hello()
        };
        let err = tokio::time::timeout(Duration::from_secs(20), c.predict(req))
            .await?
            .expect_err("another model's identity is refused");
        assert_eq!(
            err.code(),
            Code::NotFound,
            "{}",
            &err.message()[..200.min(err.message().len())]
        );
        assert!(
            err.message().len() < MESSAGE_LIMIT,
            "{} bytes",
            err.message().len()
        );
        assert!(
            err.message().contains("model identity mismatch"),
            "{}",
            err.message()
        );
    }
    drop(identity);
    let limit = before + (64 << 20);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut now = rss(server.pid())?;
    while now > limit && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = rss(server.pid())?;
    }
    assert!(
        now <= limit,
        "RSS {} MiB after, {} MiB before",
        now >> 20,
        before >> 20
    );
    // The page is rendered once a second, so the last errors show within one sample.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (status, doc) = loop {
        let status = get(&format!("http://127.0.0.1:{port}/status.json")).await?;
        let doc: serde_json::Value = serde_json::from_str(&status)?;
        let shown = doc["errors"].as_array().map_or(0, Vec::len);
        if shown == 10 || Instant::now() > deadline {
            break (status, doc);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let errors = doc["errors"].as_array().ok_or("errors")?;
    assert_eq!(errors.len(), 10);
    for e in errors {
        let message = e["message"].as_str().ok_or("message")?;
        assert!(message.len() <= MESSAGE_LIMIT, "{} bytes", message.len());
    }
    assert!(
        status.len() < 256 << 10,
        "/status.json is {} bytes",
        status.len()
    );
    media_is_refused_by_name(&mut c).await?;
    still_serving(&mut c).await?;
    assert!(server.is_running());
    Ok(())
}

/// `Images`, `Videos` and `Audios` are refused with INVALID_ARGUMENT naming the field.
async fn media_is_refused_by_name(c: &mut BackendClient<Channel>) -> TestResult {
    let cases: [(&str, fn(&mut pb::PredictOptions)); 3] = [
        ("Images", |r| r.images = vec!["aGk=".into()]),
        ("Videos", |r| r.videos = vec!["aGk=".into()]),
        ("Audios", |r| r.audios = vec!["aGk=".into()]),
    ];
    for (field, set) in cases {
        let mut req = hello();
        set(&mut req);
        let err = c.predict(req.clone()).await.expect_err(field);
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(err.message().contains(field), "{field}: {err:?}");
        let err = c.predict_stream(req).await.expect_err(field);
        assert!(err.message().contains(field), "{field}: {err:?}");
    }
    Ok(())
}

/// LoadModel with `options` (and the request's other fields from `with`); the failure's
/// message, which must be short.
async fn refusal(
    c: &mut BackendClient<Channel>,
    options: &[&str],
    with: impl FnOnce(&mut pb::ModelOptions),
) -> TestResult<String> {
    let mut req = pb::ModelOptions {
        model: fixture(MODEL)?.to_string_lossy().into_owned(),
        options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    with(&mut req);
    let reply = tokio::time::timeout(Duration::from_secs(30), c.load_model(req))
        .await??
        .into_inner();
    assert!(!reply.success, "{options:?} loaded: {reply:?}");
    assert!(
        reply.message.len() < MESSAGE_LIMIT,
        "{} bytes",
        reply.message.len()
    );
    Ok(reply.message)
}

/// The option refusals of the issue: each names the option, its range and the value.
async fn options_are_refused_by_name(c: &mut BackendClient<Channel>) -> TestResult {
    let none = |_: &mut pb::ModelOptions| {};
    for (option, wanted) in [
        ("p2p_wait:1.5", &["`p2p_wait`", "[1, 600]", "1.5"][..]),
        ("p2p_wait:601", &["`p2p_wait`", "[1, 600]", "601"]),
        (
            "quantized_kv_start:1e11",
            &["`quantized_kv_start`", "[0, 16777216]", "100000000000"],
        ),
        (
            "join_timeout:3601",
            &["`join_timeout`", "[1, 3600]", "3601"],
        ),
        (
            "queue_timeout:999999",
            &["`queue_timeout`", "[1, 3600]", "999999"],
        ),
        ("max_batch:1000000", &["`max_batch`", "[1, 1024]"]),
    ] {
        let message = refusal(c, &[option, "p2p_token:t"], none).await?;
        for w in wanted {
            assert!(message.contains(w), "{option}: {message}");
        }
    }
    let message = refusal(c, &["cache_type_k:q4_0", "kv_bits:8"], none).await?;
    assert!(
        message.contains("`kv_bits`") && message.contains("`cache_type_k`"),
        "{message}"
    );
    let long_key = format!("{}:1", "k".repeat(1 << 20));
    let message = refusal(c, &["max_batch:0", &long_key], none).await?;
    assert!(message.contains("`max_batch`"), "{message}");
    let message = refusal(c, &[], |r| r.lora_base = "base".into()).await?;
    assert!(
        message.contains("LoraBase") && !message.contains("quantized model"),
        "{message}"
    );
    Ok(())
}

/// A scratch mlx-lm adapter for SmolLM2's layer 0 `q_proj` (576 -> 576), its factors made by
/// `factor`; `corrupt` writes bytes that are no safetensors file instead.
fn adapter(
    dir: &Path,
    name: &str,
    factor: &dyn Fn(&[i32]) -> TestResult<Array>,
) -> TestResult<String> {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder)?;
    let config = r#"{"lora_parameters": {"rank": 2, "scale": 1.0}}"#;
    std::fs::write(folder.join("adapter_config.json"), config)?;
    let layer = "model.layers.0.self_attn.q_proj";
    let arrays = HashMap::from([
        (format!("{layer}.lora_a"), factor(&[576, 2])?),
        (format!("{layer}.lora_b"), factor(&[2, 576])?),
    ]);
    Array::save_safetensors(arrays, None, folder.join("adapters.safetensors"))?;
    Ok(folder.to_string_lossy().into_owned())
}

/// NaN, infinite and integer LoRA factors are refused naming the factor; a corrupt adapter
/// file's error carries MLX's message and no Rust source location.
async fn lora_factors_are_checked(c: &mut BackendClient<Channel>, dir: &Path) -> TestResult {
    let nan = adapter(dir, "nan", &|s| {
        Ok(mlx_rs::ops::full::<f32>(s, Array::from_f32(f32::NAN))?)
    })?;
    let inf = adapter(dir, "inf", &|s| {
        Ok(mlx_rs::ops::full::<f32>(s, Array::from_f32(f32::INFINITY))?)
    })?;
    let int = adapter(dir, "int", &|s| Ok(mlx_rs::ops::ones::<i32>(s)?))?;
    for (folder, wanted) in [(nan, "NaN"), (inf, "infinite"), (int, "floating point")] {
        let message = refusal(c, &[], |r| r.lora_adapter = folder.clone()).await?;
        assert!(
            message.contains(wanted) && message.contains("q_proj"),
            "{message}"
        );
    }
    let corrupt = adapter(dir, "corrupt", &|s| Ok(mlx_rs::ops::zeros::<f32>(s)?))?;
    std::fs::write(
        Path::new(&corrupt).join("adapters.safetensors"),
        b"not a safetensors file",
    )?;
    let message = refusal(c, &[], |r| r.lora_adapter = corrupt.clone()).await?;
    assert!(message.contains("adapters.safetensors"), "{message}");
    assert!(
        !message.contains(".rs:") && !message.contains("/rustc/") && !message.contains(".cpp:"),
        "{message}"
    );
    Ok(())
}

/// Defect 9's items over one backend (its log kept): option ranges, the kv conflict,
/// LoraBase, LoRA factors, MLX's text; 200,000 unknown option entries logged once per key;
/// then the golden answer and Health.
#[tokio::test]
async fn bad_values_are_refused_by_name_and_logged_once() -> TestResult {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new("echoes")?;
    let log_path = dir.0.join("backend.log");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut child = Command::new(workspace_binary("mlx-distributed-backend")?)
        .args(["--addr", &addr])
        .env_remove("LOCALAI_GRPC_AUTH_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()?;
    let outcome = async {
        let mut c = connect_within(&addr, Duration::from_secs(20)).await?;
        assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
        options_are_refused_by_name(&mut c).await?;
        lora_factors_are_checked(&mut c, &dir.0).await?;
        let flood: Vec<String> = (0..200_000)
            .map(|i| format!("unknown_{}:1", i % 3))
            .collect();
        let flood: Vec<&str> = flood.iter().map(String::as_str).collect();
        let started = Instant::now();
        let message = refusal(&mut c, &flood, |r| r.model = "/no/such/model".into()).await?;
        assert!(message.contains("/no/such/model"), "{message}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
        still_serving(&mut c).await
    }
    .await;
    let running = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    outcome?;
    assert!(running, "the backend ended");
    let log = std::fs::read_to_string(&log_path)?;
    let lines = log.matches("unknown option ignored").count();
    assert_eq!(lines, 3, "unknown option lines in the log: {lines}");
    Ok(())
}

/// A model YAML nested 100,000 levels deep is refused at once naming the limit and the
/// line, as is one over the size limit: `worker serve --config` exits within seconds.
#[test]
fn deep_or_huge_yaml_is_refused_quickly() -> TestResult {
    let dir = TempDir::new("echoes-yaml")?;
    let deep = dir.0.join("deep.yaml");
    let nest = format!(
        "name: x\nextra: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    std::fs::write(&deep, nest)?;
    let huge = dir.0.join("huge.yaml");
    std::fs::write(&huge, format!("name: x\n# {}\n", "y".repeat(2 << 20)))?;
    for (file, wanted) in [(&deep, "64 levels at line 2"), (&huge, "over the limit")] {
        let started = Instant::now();
        let child = Command::new(workspace_binary("worker")?)
            .args([
                "serve",
                "--addr",
                &format!("127.0.0.1:{}", free_port()?),
                "--config",
            ])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let out = wait_bounded(child, Duration::from_secs(20))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(wanted), "{stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    Ok(())
}
