//! `ship_model:true` on real two-rank clusters on loopback: the worker runs in a mount
//! namespace of its own where the fixture's folder is an empty tmpfs, so it can only serve
//! what rank 0 shipped into its cache.

use std::path::{Path, PathBuf};
use std::time::Duration;

use integration_tests::cluster::{worker_without_model, Cluster, TempDir};
use integration_tests::rpc::{golden_request, load_fixture};
use integration_tests::{fixture, goldens, wait_bounded, TestResult};

const GOLDENS: &str = "smollm2-135m-4bit-f32";
const MODEL: &str = "smollm2-135m-4bit";
/// Rank 1 holds layers 15..30.
const SPLIT: &str = "layer_split:15,15";
const WORKER_LAYERS: std::ops::Range<usize> = 15..30;

/// One cluster test at a time: each runs several processes on a 2-core box (an async lock:
/// it is held across awaits; a test that fails does not poison it).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Bytes of rank 1's share, from the fixture itself: its layers' tensors, the safetensors
/// header, and the folder's other visible files.
fn share_bytes() -> TestResult<u64> {
    let dir = fixture(MODEL)?;
    let mut total = side_files(&dir)?;
    let bytes = std::fs::read(dir.join("model.safetensors"))?;
    let len = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
    total += 8 + len as u64;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len])?;
    for (key, entry) in header.as_object().ok_or("no header")? {
        let layer = key
            .strip_prefix("model.layers.")
            .and_then(|r| r.split('.').next()?.parse::<usize>().ok());
        if layer.is_some_and(|l| WORKER_LAYERS.contains(&l)) {
            let o = &entry["data_offsets"];
            total += o[1].as_u64().ok_or("offset")? - o[0].as_u64().ok_or("offset")?;
        }
    }
    Ok(total)
}

/// The one model folder in the cache, and its last transfer's record.
fn last_transfer(cache: &Path) -> TestResult<(PathBuf, serde_json::Value)> {
    let dirs: Vec<PathBuf> = std::fs::read_dir(cache)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    let [dir] = dirs.as_slice() else {
        return Err(format!("expected one shipped model in the cache, found {dirs:?}").into());
    };
    let record = std::fs::read(dir.join(".shipping/last-transfer.json"))?;
    Ok((dir.clone(), serde_json::from_slice(&record)?))
}

async fn assert_golden(
    c: &mut backend::grpc::pb::backend_client::BackendClient<tonic::transport::Channel>,
    name: &str,
) -> TestResult {
    let g = goldens::load(GOLDENS)?;
    let case = g.cases.iter().find(|c| c.name == name).ok_or("no case")?;
    let reply = c
        .predict(golden_request(case, g.max_tokens))
        .await?
        .into_inner();
    assert_eq!(String::from_utf8(reply.message)?, case.text, "case {name}");
    Ok(())
}

#[tokio::test]
async fn a_worker_without_the_model_serves_it_from_one_shipment() -> TestResult {
    let _serial = SERIAL.lock().await;
    let cache = TempDir::new("ship-cache")?;
    let cluster = Cluster::shipping_pair("ship", MODEL, &cache.0)?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;

    // Without shipping, the worker has nothing to load.
    let refused = load_fixture(&mut c, MODEL, &[SPLIT]).await?;
    assert!(!refused.success, "{refused:?}");
    let loaded = load_fixture(&mut c, MODEL, &["ship_model:true", SPLIT]).await?;
    assert!(loaded.success, "{loaded:?}");
    assert_golden(&mut c, "capital-chat").await?;
    assert_golden(&mut c, "haiku-plain").await?;
    let share = share_bytes()?;
    let (dir, first) = last_transfer(&cache.0)?;
    let received = first["received_bytes"].as_u64().ok_or("no count")?;
    assert_eq!(first["share_bytes"].as_u64(), Some(share), "{first}");
    assert!(received >= share, "{received} < {share}");
    assert!(
        received * 100 <= share * 105,
        "{received} > 105% of {share}"
    );
    // The safetensors file keeps its size but holds only the share (the rest is holes).
    let weights = dir.join("model.safetensors");
    let original = std::fs::metadata(fixture(MODEL)?.join("model.safetensors"))?.len();
    assert_eq!(std::fs::metadata(&weights)?.len(), original);

    let again = load_fixture(&mut c, MODEL, &["ship_model:true", SPLIT]).await?;
    assert!(again.success, "{again:?}");
    let (_, second) = last_transfer(&cache.0)?;
    assert_eq!(second["received_bytes"].as_u64(), Some(0), "{second}");
    assert_eq!(second["items_received"].as_u64(), Some(0), "{second}");
    assert_golden(&mut c, "capital-chat").await?;
    Ok(())
}

/// Bytes of a worker's share of `parts` in tensor or expert mode, from the fixture itself:
/// the folder's other visible files, the safetensors header, its part of every projection
/// matrix (each layer's `*_proj` weight, scales and biases: attention's and the MLP's or the
/// stacked experts', cut by rows, columns or experts into equal parts), and every other
/// tensor (embedding, norms, router) whole.
fn sliced_share_bytes(model: &str, parts: u64) -> TestResult<u64> {
    let dir = fixture(model)?;
    let mut total = side_files(&dir)?;
    let bytes = std::fs::read(dir.join("model.safetensors"))?;
    let len = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
    total += 8 + len as u64;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len])?;
    for (key, entry) in header.as_object().ok_or("no header")? {
        let o = &entry["data_offsets"];
        let Some(size) = o[1].as_u64().zip(o[0].as_u64()).map(|(e, b)| e - b) else {
            continue;
        };
        let split = key.starts_with("model.layers.") && key.contains("_proj.");
        total += if split { size / parts } else { size };
    }
    Ok(total)
}

/// Bytes of the folder's visible files other than the weights.
fn side_files(dir: &Path) -> TestResult<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().ok_or("no name")?.to_string_lossy();
        if !name.starts_with('.') && !name.ends_with(".safetensors") {
            total += std::fs::metadata(&path)?.len();
        }
    }
    Ok(total)
}

/// SmolLM2's 9 heads and 3 KV heads split over 3 ranks (not 2): two workers without the
/// model, each shipped its third of every projection matrix and the rest whole.
#[tokio::test]
async fn tensor_mode_workers_without_the_model_serve_it_from_their_slices() -> TestResult {
    let _serial = SERIAL.lock().await;
    const TENSOR: [&str; 2] = ["ship_model:true", "parallelism:tensor"];
    let caches = [
        TempDir::new("ship-tensor-1")?,
        TempDir::new("ship-tensor-2")?,
    ];
    let mut cluster = Cluster::without_workers(3, "ship-tensor")?;
    for (rank, cache) in (1..).zip(&caches) {
        let worker = worker_without_model(&cluster, (rank, MODEL, &cache.0), &[])?;
        cluster.workers.push(worker);
    }
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;

    let loaded = load_fixture(&mut c, MODEL, &TENSOR).await?;
    assert!(loaded.success, "{loaded:?}");
    // One case: three tensor ranks on two cores decode at about 1 tok/s.
    assert_golden(&mut c, "capital-chat").await?;
    let share = sliced_share_bytes(MODEL, 3)?;
    for cache in &caches {
        let (_, first) = last_transfer(&cache.0)?;
        let received = first["received_bytes"].as_u64().ok_or("no count")?;
        assert_eq!(first["share_bytes"].as_u64(), Some(share), "{first}");
        assert!(received >= share, "{received} < {share}");
        // The embedding whole (a fifth of the file), a third of nearly all the rest.
        let whole = std::fs::metadata(fixture(MODEL)?.join("model.safetensors"))?.len();
        assert!(share * 10 < whole * 6, "{share} of {whole} bytes");
        assert!(
            received * 100 <= share * 105,
            "{received} > 105% of {share}"
        );
    }

    let again = load_fixture(&mut c, MODEL, &TENSOR).await?;
    assert!(again.success, "{again:?}");
    for cache in &caches {
        let (_, second) = last_transfer(&cache.0)?;
        assert_eq!(second["received_bytes"].as_u64(), Some(0), "{second}");
        assert_eq!(second["items_received"].as_u64(), Some(0), "{second}");
    }
    assert_golden(&mut c, "capital-chat").await?;
    Ok(())
}

/// Expert mode (whole experts per rank, attention cut as in tensor mode) on a tiny MoE: the
/// worker without the model answers as one node with it does.
#[tokio::test]
async fn an_expert_mode_worker_without_the_model_serves_it() -> TestResult {
    let _serial = SERIAL.lock().await;
    const MOE: &str = "tiny-qwen3-moe-4bit";
    let single = integration_tests::server::BackendProcess::start(&[]).await?;
    let mut one = single.client().await?;
    assert!(load_fixture(&mut one, MOE, &[]).await?.success);
    let cache = TempDir::new("ship-expert-cache")?;
    let mut cluster = Cluster::without_workers(2, "ship-expert")?;
    let worker = worker_without_model(&cluster, (1, MOE, &cache.0), &[])?;
    cluster.workers.push(worker);
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    let options = ["ship_model:true", "parallelism:expert"];
    let loaded = load_fixture(&mut c, MOE, &options).await?;
    assert!(loaded.success, "{loaded:?}");
    let req = backend::grpc::pb::PredictOptions {
        prompt: "The quick brown fox".into(),
        tokens: 16,
        ignore_eos: true,
        ..Default::default()
    };
    let want = one.predict(req.clone()).await?.into_inner();
    let got = c.predict(req).await?.into_inner();
    assert_eq!(got.message, want.message);
    let (_, first) = last_transfer(&cache.0)?;
    let received = first["received_bytes"].as_u64().ok_or("no count")?;
    let share = sliced_share_bytes(MOE, 2)?;
    assert_eq!(first["share_bytes"].as_u64(), Some(share), "{first}");
    assert!(received * 100 <= share * 105, "{received} vs {share}");
    Ok(())
}

#[tokio::test]
async fn a_transfer_killed_midway_resumes_where_it_stopped() -> TestResult {
    let _serial = SERIAL.lock().await;
    const CUT: u64 = 12_000_000;
    let cache = TempDir::new("ship-resume-cache")?;
    let cluster = Cluster::without_workers(2, "ship-resume")?;
    let cut = CUT.to_string();
    let dying = worker_without_model(
        &cluster,
        (1, MODEL, &cache.0),
        &[("MLX_DISTRIBUTED_SHIP_EXIT_AFTER", cut.as_str())],
    )?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    let cut_off = load_fixture(&mut c, MODEL, &["ship_model:true", SPLIT]).await?;
    assert!(!cut_off.success, "{cut_off:?}");
    let died = wait_bounded(dying, Duration::from_secs(30))?;
    assert_eq!(died.status.code(), Some(86), "the test hook's exit");

    let mut cluster = cluster;
    cluster
        .workers
        .push(worker_without_model(&cluster, (1, MODEL, &cache.0), &[])?);
    let loaded = load_fixture(&mut c, MODEL, &["ship_model:true", SPLIT]).await?;
    assert!(loaded.success, "{loaded:?}");
    let (_, rest) = last_transfer(&cache.0)?;
    let received = rest["received_bytes"].as_u64().ok_or("no count")?;
    let share = share_bytes()?;
    // Only what had not arrived: at most the item cut off (a layer tensor is under 2 MiB) more.
    assert!(
        received + CUT <= share + (2 << 20),
        "{received} + {CUT} vs {share}"
    );
    assert!(received > 0);
    assert_golden(&mut c, "capital-chat").await?;
    Ok(())
}

#[tokio::test]
async fn a_tensor_corrupted_on_every_try_fails_the_load_naming_it() -> TestResult {
    let _serial = SERIAL.lock().await;
    const TENSOR: &str = "model.layers.20.mlp.down_proj.weight";
    let cache = TempDir::new("ship-corrupt-cache")?;
    let mut cluster = Cluster::shipping_pair("ship-corrupt", MODEL, &cache.0)?;
    let rank0 = cluster
        .rank0(&[("MLX_DISTRIBUTED_SHIP_CORRUPT", TENSOR)])
        .await?;
    let mut c = rank0.client().await?;
    let failed = load_fixture(&mut c, MODEL, &["ship_model:true", SPLIT]).await?;
    assert!(!failed.success, "{failed:?}");
    for part in [TENSOR, "sha256", "3 times", "rank 1"] {
        assert!(failed.message.contains(part), "{part:?} not in {failed:?}");
    }
    // The worker is still there, and the load it failed left it serving nothing.
    assert!(
        cluster.workers[0].try_wait()?.is_none(),
        "the worker exited"
    );
    Ok(())
}
