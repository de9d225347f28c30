//! Model shipping's throughput on loopback against `scp -r` of the whole model folder (a
//! private sshd on a free port, keys made for the run; when that cannot start, `cat` of the
//! folder's files into a TCP socket, said so in the output). Shipping: a two-rank cluster
//! whose worker cannot see the model and starts from an empty cache each run, layers 1..30 on
//! the worker; the worker's own record of bytes and seconds, and LoadModel's wall time
//! against a cached reload (which adds rank 0 hashing the share and both ranks loading).
//! `cargo bench -p integration-tests --bench shipping`; the best of RUNS.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::cluster::{Cluster, TempDir};
use integration_tests::rpc::load_fixture;
use integration_tests::{fixture, free_port, TestResult};

const MODEL: &str = "smollm2-135m-4bit";
const RUNS: usize = 3;
const OPTIONS: &[&str] = &["ship_model:true", "layer_split:1,29"];

/// (MB/s of the worker's transfer, its bytes, shipping load's seconds, cached reload's).
async fn ship_runs() -> TestResult<(f64, u64, f64, f64)> {
    let cache = TempDir::new("bench-ship-cache")?;
    let cluster = Cluster::shipping_pair("bench-ship", MODEL, &cache.0)?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    let (mut best, mut bytes, mut load, mut cached) = (0.0f64, 0, f64::MAX, f64::MAX);
    for _ in 0..RUNS {
        for entry in std::fs::read_dir(&cache.0)? {
            std::fs::remove_dir_all(entry?.path())?;
        }
        let t = Instant::now();
        let r = load_fixture(&mut c, MODEL, OPTIONS).await?;
        load = load.min(t.elapsed().as_secs_f64());
        assert!(r.success, "{r:?}");
        let dir = std::fs::read_dir(&cache.0)?
            .next()
            .ok_or("empty cache")??
            .path();
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(".shipping/last-transfer.json"))?)?;
        bytes = record["received_bytes"].as_u64().ok_or("no bytes")?;
        let secs = record["secs"].as_f64().ok_or("no secs")?;
        let sync = record["sync_secs"].as_f64().ok_or("no sync_secs")?;
        println!("  run: {bytes} bytes in {secs:.3} s, of which fsync {sync:.3} s");
        best = best.max(bytes as f64 / secs / 1e6);
        let t = Instant::now();
        assert!(load_fixture(&mut c, MODEL, OPTIONS).await?.success);
        cached = cached.min(t.elapsed().as_secs_f64());
    }
    Ok((best, bytes, load, cached))
}

/// Bytes of the model folder.
fn folder_bytes(dir: &Path) -> TestResult<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        total += e?.metadata()?.len();
    }
    Ok(total)
}

/// A private sshd on a free port with keys made for the run, and the ssh options to reach it.
fn sshd(dir: &Path) -> TestResult<(Child, Vec<String>)> {
    let keygen = |name: &str| -> TestResult {
        let ok = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(name))
            .status()?
            .success();
        ok.then_some(())
            .ok_or_else(|| format!("ssh-keygen {name} failed").into())
    };
    keygen("host")?;
    keygen("user")?;
    std::fs::copy(dir.join("user.pub"), dir.join("authorized_keys"))?;
    let port = free_port()?;
    let d = dir.display();
    let child = Command::new("/usr/sbin/sshd")
        .args(["-D", "-e", "-f", "/dev/null", "-p", &port.to_string()])
        .args(["-o", &format!("HostKey={d}/host")])
        .args(["-o", &format!("AuthorizedKeysFile={d}/authorized_keys")])
        .args(["-o", "StrictModes=no", "-o", "PermitRootLogin=yes"])
        // scp speaks SFTP by default; an sshd without a config has no subsystem for it.
        .args(["-o", "Subsystem=sftp internal-sftp"])
        .args(["-o", &format!("PidFile={d}/sshd.pid")])
        .stderr(Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(500));
    let opts = [
        "-P".to_string(),
        port.to_string(),
        "-i".into(),
        format!("{d}/user"),
        "-o".into(),
        "StrictHostKeyChecking=no".into(),
        "-o".into(),
        format!("UserKnownHostsFile={d}/known_hosts"),
        "-o".into(),
        "BatchMode=yes".into(),
    ];
    Ok((child, opts.to_vec()))
}

/// Seconds of `scp -r` of the folder to a fresh place, best of RUNS; None when sshd is not usable.
fn scp_secs(model: &Path) -> TestResult<Option<f64>> {
    let keys = TempDir::new("bench-ship-ssh")?;
    let (mut sshd, opts) = match sshd(&keys.0) {
        Ok(started) => started,
        Err(e) => {
            println!("scp: cannot start a private sshd: {e}");
            return Ok(None);
        }
    };
    let mut best: Option<f64> = None;
    for i in 0..RUNS {
        let target = keys.0.join(format!("copy{i}"));
        let t = Instant::now();
        let ok = Command::new("scp")
            .args(&opts)
            .arg("-q")
            .arg("-r")
            .arg(model)
            .arg(format!("root@127.0.0.1:{}", target.display()))
            .status()?
            .success();
        if !ok {
            break;
        }
        let secs = t.elapsed().as_secs_f64();
        best = Some(best.map_or(secs, |b| b.min(secs)));
    }
    let _ = sshd.kill();
    let _ = sshd.wait();
    Ok(best)
}

/// Seconds of the folder's files `cat` into a loopback TCP socket and read out, best of RUNS.
fn tcp_cat_secs(model: &Path) -> TestResult<f64> {
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let reader = std::thread::spawn(move || -> std::io::Result<u64> {
            let (mut s, _) = listener.accept()?;
            std::io::copy(&mut s, &mut std::io::sink())
        });
        let t = Instant::now();
        let mut sock = std::net::TcpStream::connect(addr)?;
        for e in std::fs::read_dir(model)? {
            std::io::copy(&mut std::fs::File::open(e?.path())?, &mut sock)?;
        }
        drop(sock);
        reader.join().map_err(|_| "reader panicked")??;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

#[tokio::main]
async fn main() -> TestResult {
    let model = fixture(MODEL)?;
    let total = folder_bytes(&model)?;
    let (mb_s, bytes, load, cached) = ship_runs().await?;
    println!(
        "shipping: {bytes} bytes (layers 1..30 + side files) at {mb_s:.0} MB/s (worker's record)"
    );
    println!("  LoadModel with an empty cache {load:.2} s, cached reload {cached:.2} s");
    let scp = scp_secs(&model)?;
    match scp {
        Some(s) => println!(
            "scp -r: {total} bytes in {s:.2} s = {:.0} MB/s",
            total as f64 / s / 1e6
        ),
        None => println!("scp -r: no usable sshd here"),
    }
    let cat = tcp_cat_secs(&model)?;
    println!(
        "cat over loopback TCP: {total} bytes in {cat:.3} s = {:.0} MB/s",
        total as f64 / cat / 1e6
    );
    let json = serde_json::json!({
        "ship_mb_s": mb_s, "ship_bytes": bytes, "ship_load_s": load, "cached_load_s": cached,
        "scp_s": scp, "tcp_cat_s": cat, "folder_bytes": total,
    });
    println!("{json}");
    Ok(())
}
