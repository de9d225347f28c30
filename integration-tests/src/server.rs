//! The real `mlx-distributed-backend` binary on a free loopback port, with a tonic client.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backend::grpc::pb::backend_client::BackendClient;
use backend::grpc::pb::HealthMessage;
use tonic::transport::Channel;

use crate::{free_port, TestResult};

/// A binary of this workspace, built next to the test executable (`cargo build --workspace --bins`).
pub fn workspace_binary(name: &str) -> TestResult<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .ok_or("no target dir")?;
    let path = dir.join(name);
    if !path.is_file() {
        return Err(format!(
            "{} is missing: run `cargo build --workspace --bins` (scripts/test does)",
            path.display()
        )
        .into());
    }
    Ok(path)
}

/// A running backend process; killed when dropped.
pub struct BackendProcess {
    child: Child,
    pub addr: String,
}

impl BackendProcess {
    /// Starts the backend with extra environment variables and waits until Health answers.
    pub async fn start(env: &[(&str, &str)]) -> TestResult<BackendProcess> {
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(workspace_binary("mlx-distributed-backend")?);
        cmd.args(["--addr", &addr])
            .env_remove("LOCALAI_GRPC_AUTH_TOKEN")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let process = BackendProcess {
            child: cmd.spawn()?,
            addr,
        };
        process.wait_healthy(Duration::from_secs(20)).await?;
        Ok(process)
    }

    /// `worker ARGS --addr A` serving gRPC (`serve --config`, `mlx-distributed --rank 0
    /// --config`): waits until Health answers, which it does once a preloaded model is loaded
    /// (up to `limit`).
    pub async fn worker(args: &[&str], limit: Duration) -> TestResult<BackendProcess> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut cmd = Command::new(workspace_binary("worker")?);
        cmd.args(args)
            .args(["--addr", &addr])
            .env_remove("LOCALAI_GRPC_AUTH_TOKEN")
            .env_remove("MLX_DISTRIBUTED_TOKEN")
            .env_remove("MLX_DISTRIBUTED_HOSTFILE")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let process = BackendProcess {
            child: cmd.spawn()?,
            addr,
        };
        process.wait_healthy(limit).await?;
        Ok(process)
    }

    async fn wait_healthy(&self, limit: Duration) -> TestResult {
        let start = Instant::now();
        loop {
            if let Ok(mut c) = self.raw_client().await {
                match c.health(HealthMessage {}).await {
                    Ok(_) => return Ok(()),
                    // Up, but behind auth: that is healthy too.
                    Err(s) if s.code() == tonic::Code::Unauthenticated => return Ok(()),
                    Err(_) => {}
                }
            }
            if start.elapsed() > limit {
                return Err(
                    format!("backend at {} not healthy within {limit:?}", self.addr).into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn raw_client(&self) -> Result<BackendClient<Channel>, tonic::transport::Error> {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .expect("valid uri")
            .connect()
            .await?;
        Ok(BackendClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20))
    }

    pub async fn client(&self) -> TestResult<BackendClient<Channel>> {
        Ok(self.raw_client().await?)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends signal `name` and waits up to `limit` for the exit: its status and how long.
    pub fn stop(
        &mut self,
        name: &str,
        limit: Duration,
    ) -> TestResult<(std::process::ExitStatus, Duration)> {
        crate::signal(self.pid(), name)?;
        crate::wait_exit(&mut self.child, limit)
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
