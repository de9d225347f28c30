//! `worker serve --config model.yaml`: the YAML's model is loaded before gRPC is served, and
//! it answers as the backend does after the LoadModel a host would send for that YAML; a
//! YAML whose model cannot load ends the process with the error, and SIGTERM ends it with 0.
//! The same file starts a 2-rank pipeline's worker and rank 0, which serves its model.

use std::process::{Command, Stdio};
use std::time::Duration;

use backend::grpc::pb;
use integration_tests::cluster::TempDir;
use integration_tests::rpc::{chat_request, load_fixture};
use integration_tests::server::{workspace_binary, BackendProcess};
use integration_tests::{fixture, wait_bounded, TestResult};

const MODEL: &str = "smollm2-135m-4bit";

fn yaml(model: &str) -> String {
    format!(
        "name: smol\nbackend: mlx-distributed\nparameters:\n  model: {model}\ntemplate:\n  \
         use_tokenizer_template: true\ncontext_size: 1024\noptions:\n  - \"max_batch:4\"\n"
    )
}

async fn answer(server: &BackendProcess) -> TestResult<String> {
    let req = chat_request("What is the capital of France?", 24);
    let reply = server.client().await?.predict(req).await?.into_inner();
    Ok(String::from_utf8(reply.message)?)
}

#[tokio::test]
async fn a_model_yaml_is_served_as_after_the_hosts_load_model() -> TestResult {
    let dir = TempDir::new("serve-config")?;
    let path = dir.0.join("smol.yaml");
    std::fs::write(&path, yaml(&fixture(MODEL)?.display().to_string()))?;
    let config = path.to_str().ok_or("a UTF-8 path")?;
    let limit = Duration::from_secs(120);
    let mut served = BackendProcess::worker(&["serve", "--config", config], limit).await?;
    let status = served.client().await?.status(pb::HealthMessage {}).await?;
    let ready = pb::status_response::State::Ready as i32;
    assert_eq!(status.into_inner().state, ready, "loaded before serving");
    let theirs = {
        let host = BackendProcess::start(&[]).await?;
        let loaded = load_fixture(&mut host.client().await?, MODEL, &["max_batch:4"]).await?;
        assert!(loaded.success, "{loaded:?}");
        answer(&host).await?
    };
    assert_eq!(answer(&served).await?, theirs);
    let (exit, _) = served.stop("TERM", Duration::from_secs(10))?;
    assert!(exit.success(), "{exit:?}");
    Ok(())
}

#[test]
fn a_model_that_cannot_load_ends_the_process_naming_it() -> TestResult {
    let dir = TempDir::new("serve-bad")?;
    let path = dir.0.join("missing.yaml");
    std::fs::write(&path, yaml("/no/such/model"))?;
    let child = Command::new(workspace_binary("worker")?)
        .args(["serve", "--addr", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = wait_bounded(child, Duration::from_secs(60))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("/no/such/model"), "{stderr}");
    Ok(())
}

/// One YAML, its options naming the hostfile: `worker mlx-distributed --rank 1 --config` and
/// `--rank 0 --config`, and rank 0 serves the model over both ranks with no LoadModel.
#[tokio::test]
async fn one_yaml_starts_both_ranks_and_rank_0_serves_its_model() -> TestResult {
    let cluster = integration_tests::cluster::Cluster::without_workers(2, "serve-ranks")?;
    let path = cluster.hostfile.with_file_name("pipeline.yaml");
    // The 8-bit model knows the answer (the 4-bit one rambles).
    let model = fixture("smollm2-135m-8bit")?.display().to_string();
    let text = yaml(&model).replace(
        "options:\n",
        &format!(
            "options:\n  - \"hostfile:{}\"\n  - \"parallelism:pipeline\"\n",
            cluster.hostfile.display()
        ),
    );
    std::fs::write(&path, text)?;
    let config = path.to_str().ok_or("a UTF-8 path")?;
    let mut worker = Command::new(workspace_binary("worker")?)
        .args(["mlx-distributed", "--rank", "1", "--config", config])
        .env_remove("MLX_DISTRIBUTED_HOSTFILE")
        .env_remove("MLX_DISTRIBUTED_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let args = ["mlx-distributed", "--rank", "0", "--config", config];
    let served = BackendProcess::worker(&args, Duration::from_secs(120)).await;
    let answered = match served {
        Ok(rank0) => answer(&rank0).await,
        Err(e) => Err(e),
    };
    let _ = worker.kill();
    let _ = worker.wait();
    let answered = answered?;
    assert!(answered.contains("Paris"), "{answered}");
    Ok(())
}
