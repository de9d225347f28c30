//! A real cluster on loopback: a ring hostfile, `worker mlx-distributed` processes for
//! ranks 1 and up, and rank 0 as the real backend binary; everything is killed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::server::{workspace_binary, BackendProcess};
use crate::TestResult;

/// Ports for `ranks` ranks, each with the next port free too (rank 0's control channel):
/// [`crate::free_port`] never hands out a port or the one after it twice.
pub fn ring_ports(ranks: usize) -> TestResult<Vec<u16>> {
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < ranks {
        let port = crate::free_port()?;
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            ports.push(port);
        }
    }
    Ok(ports)
}

/// Ranks 1.. as worker processes and a hostfile for them; rank 0 is started separately.
pub struct Cluster {
    pub hostfile: PathBuf,
    pub workers: Vec<Child>,
    _dir: TempDir,
}

impl Cluster {
    /// Writes a ring hostfile for `ranks` ranks and starts ranks 1.. (workers first, as in production).
    pub fn start(ranks: usize, name: &str) -> TestResult<Cluster> {
        let mut cluster = Cluster::without_workers(ranks, name)?;
        for rank in 1..ranks {
            let child = cluster.spawn_worker(rank, &[])?;
            cluster.workers.push(child);
        }
        Ok(cluster)
    }

    /// Two ranks whose worker cannot see the fixture `model` and keeps what rank 0 ships it in
    /// `cache` (`worker_without_model`): the shipping tests' cluster.
    pub fn shipping_pair(name: &str, model: &str, cache: &Path) -> TestResult<Cluster> {
        let mut cluster = Cluster::without_workers(2, name)?;
        let worker = worker_without_model(&cluster, (1, model, cache), &[])?;
        cluster.workers.push(worker);
        Ok(cluster)
    }

    /// Writes a ring hostfile for `ranks` ranks and starts no worker (a test starts them when
    /// it wants, with `spawn_worker`).
    pub fn without_workers(ranks: usize, name: &str) -> TestResult<Cluster> {
        let dir = TempDir::new(name)?;
        let addrs: Vec<String> = ring_ports(ranks)?
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let hostfile = dir.0.join("hostfile.json");
        std::fs::write(&hostfile, serde_json::to_string(&addrs)?)?;
        Ok(Cluster {
            hostfile,
            workers: Vec::new(),
            _dir: dir,
        })
    }

    /// Rank 0's control address: its ring port + 1 (no `control_port` option set).
    pub fn control_address(&self) -> TestResult<String> {
        let addrs: Vec<String> = serde_json::from_str(&std::fs::read_to_string(&self.hostfile)?)?;
        let first = addrs.first().ok_or("an empty hostfile")?;
        let (host, port) = first.rsplit_once(':').ok_or("no port in the hostfile")?;
        let port = port
            .parse::<u16>()?
            .checked_add(1)
            .ok_or("no port after rank 0's")?;
        Ok(format!("{host}:{port}"))
    }

    /// Starts `worker mlx-distributed --rank N` with extra environment variables.
    pub fn spawn_worker(&self, rank: usize, env: &[(&str, &str)]) -> TestResult<Child> {
        Cluster::worker_for(&self.hostfile, rank, env)
    }

    /// A worker process for any hostfile.
    pub fn worker_for(
        hostfile: &std::path::Path,
        rank: usize,
        env: &[(&str, &str)],
    ) -> TestResult<Child> {
        let mut cmd = Command::new(workspace_binary("worker")?);
        cmd.args(["mlx-distributed", "--rank", &rank.to_string(), "--hostfile"])
            .arg(hostfile)
            .env(
                "RUST_LOG",
                std::env::var("CLUSTER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("MLX_DISTRIBUTED_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Ok(cmd.spawn()?)
    }

    /// Rank 0: the backend binary with this hostfile as its default.
    pub async fn rank0(&self, env: &[(&str, &str)]) -> TestResult<BackendProcess> {
        let hostfile = self.hostfile.to_string_lossy().into_owned();
        let mut all = vec![
            ("MLX_DISTRIBUTED_HOSTFILE", hostfile.as_str()),
            ("MLX_DISTRIBUTED_TOKEN", ""),
        ];
        all.extend_from_slice(env);
        BackendProcess::start(&all).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for w in &mut self.workers {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// A scratch folder under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TestResult<TempDir> {
        let dir = std::env::temp_dir().join(format!("mlx-dist-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `worker mlx-distributed` as rank `rank` of `cluster`, in a mount namespace of its own where
/// the fixture `model` is an empty tmpfs, with `cache` as its shipping cache: it can serve only
/// what rank 0 ships it (`ship_model`).
pub fn worker_without_model(
    cluster: &Cluster,
    (rank, model, cache): (usize, &str, &Path),
    env: &[(&str, &str)],
) -> TestResult<Child> {
    let hidden = crate::fixture(model)?;
    let script = r#"mount -t tmpfs none "$HIDE" && exec "$@""#;
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
    ])
    .arg(workspace_binary("worker")?)
    .args(["mlx-distributed", "--rank", &rank.to_string(), "--hostfile"])
    .arg(&cluster.hostfile)
    .env("HIDE", &hidden)
    .env("MLX_DISTRIBUTED_SHIP_CACHE", cache)
    .env(
        "RUST_LOG",
        std::env::var("CLUSTER_LOG").unwrap_or_else(|_| "warn".into()),
    )
    .env_remove("MLX_DISTRIBUTED_TOKEN")
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Ok(cmd.spawn()?)
}
