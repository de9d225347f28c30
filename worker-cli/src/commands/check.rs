//! `worker check`: the preflight. Before anything is loaded it answers, one line per finding,
//! ✓ or ✗ with a fix: does the hostfile parse, is this machine in it, are the ports free or
//! reachable, do the workers join with the same build and MLX, and (with --model) does every
//! rank have the same model and the memory for its share.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::Path;
use std::time::Duration;

use backend::distributed::protocol::{Identity, ModelFound, ToLeader, ToWorker};
use backend::distributed::Hostfile;
use backend::distributed::{Cluster, ClusterOptions};
use backend::loader;

use super::CliResult;
use crate::args::CheckArgs;

/// The findings so far; any ✗ makes the command fail.
#[derive(Default)]
struct Report {
    failed: usize,
}

impl Report {
    fn ok(&mut self, what: impl AsRef<str>) {
        println!("✓ {}", what.as_ref());
    }
    fn fail(&mut self, what: impl AsRef<str>, fix: impl AsRef<str>) {
        self.failed += 1;
        println!("✗ {}\n    fix: {}", what.as_ref(), fix.as_ref());
    }
    fn note(&mut self, what: impl AsRef<str>) {
        println!("- {}", what.as_ref());
    }
    fn finish(self) -> CliResult {
        match self.failed {
            0 => Ok(()),
            n => Err(format!("{n} check(s) failed").into()),
        }
    }
}

/// What the check checks: the flags, over the `--config` YAML where they say nothing.
struct Preflight {
    hostfile: std::path::PathBuf,
    backend: String,
    model: Option<String>,
    model_path: Option<std::path::PathBuf>,
    /// Only rank 0 needs the model: it ships the workers their shares.
    ship_model: bool,
    coordinator: Option<String>,
    control_port: Option<u16>,
    join_timeout: u64,
    token: Option<String>,
}

impl Preflight {
    fn of(args: CheckArgs) -> CliResult<Preflight> {
        let yaml = super::config::read(args.config.as_deref())?;
        Ok(Preflight {
            hostfile: super::config::required(args.hostfile, yaml.hostfile, "--hostfile")?,
            backend: args
                .backend
                .or(yaml.backend)
                .unwrap_or_else(|| "ring".into()),
            model: args.model.or(yaml.model),
            model_path: args.model_path,
            ship_model: args.ship_model || yaml.ship_model,
            coordinator: args.coordinator.or(yaml.coordinator),
            control_port: args.control_port.or(yaml.control_port),
            join_timeout: args.join_timeout,
            token: args.token,
        })
    }
}

pub fn run(args: CheckArgs) -> CliResult {
    let args = Preflight::of(args)?;
    let mut report = Report::default();
    let hostfile = match Hostfile::read(&args.hostfile, super::transport(&args.backend)) {
        Ok(h) => {
            report.ok(format!(
                "{}: {} ranks over {}",
                args.hostfile.display(),
                h.size(),
                args.backend
            ));
            h
        }
        Err(e) => {
            report.fail(
                e.to_string(),
                "write a JSON list of \"ip:port\" per rank (ring) or a device matrix (jaccl); \
                 the README lists the formats",
            );
            return report.finish();
        }
    };
    let this_is_rank0 = match &hostfile {
        Hostfile::Ring { ranks } => check_ring(&mut report, ranks),
        Hostfile::Jaccl { devices, .. } => check_jaccl(&mut report, devices),
    };
    if !this_is_rank0 {
        report.note(
            "the join, build and model checks run on rank 0's machine: run `worker check` there",
        );
        return report.finish();
    }
    check_cluster(&mut report, &args, &hostfile);
    report.finish()
}

/// This machine's ranks and every rank's port; true when this machine is rank 0.
fn check_ring(report: &mut Report, ranks: &[Vec<String>]) -> bool {
    let addr_of = |a: &str| a.to_socket_addrs().ok().and_then(|mut it| it.next());
    let local: Vec<usize> = (0..ranks.len())
        .filter(|&r| {
            ranks[r]
                .iter()
                .any(|a| addr_of(a).is_some_and(|s| is_local(&s)))
        })
        .collect();
    match local.is_empty() {
        true => report.fail(
            "none of the hostfile's addresses is on this machine",
            "run the check on a machine the hostfile lists, or correct its IP addresses",
        ),
        false => report.ok(format!("this machine is rank {local:?}")),
    }
    for (rank, addrs) in ranks.iter().enumerate() {
        for a in addrs {
            let Some(sock) = addr_of(a) else {
                report.fail(
                    format!("rank {rank}: {a} does not resolve"),
                    "use an IP address",
                );
                continue;
            };
            if local.contains(&rank) {
                match TcpListener::bind(sock) {
                    Ok(_) => report.ok(format!("rank {rank}: {a} is free to listen on")),
                    Err(e) => report.fail(
                        format!("rank {rank}: cannot listen on {a}: {e}"),
                        "another process holds the port (a rank already running?): stop it or pick another port",
                    ),
                }
                continue;
            }
            match TcpStream::connect_timeout(&sock, Duration::from_secs(2)) {
                Ok(_) => report.ok(format!("rank {rank}: {a} answers (a rank is already running)")),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => report.ok(format!(
                    "rank {rank}: {} is reachable (the port opens when the ranks start)",
                    sock.ip()
                )),
                Err(e) => report.fail(
                    format!("rank {rank}: {a} is unreachable: {e}"),
                    "check the link and the IP address, and let TCP through the firewall on both ends",
                ),
            }
        }
    }
    local.contains(&0)
}

/// Whether `addr`'s IP is one of this machine's.
fn is_local(addr: &SocketAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).is_ok()
}

/// JACCL needs macOS with RDMA over Thunderbolt 5; elsewhere its checks are skipped.
fn check_jaccl(report: &mut Report, devices: &[Vec<Option<String>>]) -> bool {
    if !cfg!(target_os = "macos") {
        report.note("JACCL checks skipped: JACCL runs on macOS with RDMA over Thunderbolt 5");
        return true;
    }
    match std::process::Command::new("ibv_devices").output() {
        Ok(out) => {
            let listed = String::from_utf8_lossy(&out.stdout).into_owned();
            let named: std::collections::BTreeSet<&String> =
                devices.iter().flatten().flatten().collect();
            for d in named {
                match listed.contains(d.as_str()) {
                    true => report.ok(format!("RDMA device {d} exists")),
                    false => report.fail(
                        format!("RDMA device {d} is not listed by ibv_devices"),
                        "enable RDMA (`rdma_ctl enable` in recovery mode) and check the Thunderbolt 5 cable",
                    ),
                }
            }
        }
        Err(e) => report.fail(
            format!("ibv_devices did not run: {e}"),
            "JACCL needs macOS 26.2+ with RDMA enabled (`rdma_ctl enable` in recovery mode)",
        ),
    }
    match std::env::var("MLX_METAL_FAST_SYNCH").is_ok_and(|v| v == "1") {
        true => report.ok("MLX_METAL_FAST_SYNCH=1"),
        false => report.fail(
            "MLX_METAL_FAST_SYNCH is not set",
            "export MLX_METAL_FAST_SYNCH=1 on every rank (JACCL is much slower without it)",
        ),
    }
    true
}

/// Rank 0's side: the workers join (same build, MLX and protocol, checked by the handshake),
/// then each reports whether it has the model and how much memory is free.
fn check_cluster(report: &mut Report, args: &Preflight, hostfile: &Hostfile) {
    let control = match hostfile.control_address(args.coordinator.as_deref(), args.control_port) {
        Ok(c) => c,
        Err(e) => return report.fail(e, "set --control-port or --coordinator"),
    };
    let join_timeout = Duration::from_secs(args.join_timeout);
    let opts = ClusterOptions::new(
        hostfile,
        control.clone(),
        join_timeout,
        args.token.as_deref(),
    );
    let cluster = match Cluster::form(&opts) {
        Ok(c) => c,
        Err(e) => {
            return report.fail(
                e.to_string(),
                format!(
                    "start `worker mlx-distributed --rank N --hostfile {}` (this build) on every \
                     other rank, with the same MLX_DISTRIBUTED_TOKEN, then check again",
                    args.hostfile.display()
                ),
            )
        }
    };
    let id = Identity::current();
    report.ok(format!(
        "ranks 1..{} joined on {control}: the same build {}, MLX {} and protocol {}",
        hostfile.size() - 1,
        id.build,
        id.mlx,
        id.protocol
    ));
    let Some(model) = &args.model else {
        return report.note("no --model: the model and memory checks were skipped");
    };
    let probe = Probe {
        model,
        model_path: args.model_path.as_deref(),
        ship_model: args.ship_model,
    };
    probe_models(report, &cluster, &probe);
}

/// What the model probe asks about.
struct Probe<'a> {
    model: &'a str,
    model_path: Option<&'a Path>,
    ship_model: bool,
}

/// Asks every worker whether it has `model` and how much memory is free, and reports it.
fn probe_models(report: &mut Report, cluster: &Cluster, p: &Probe) {
    let (model, model_path) = (p.model, p.model_path);
    let mine = loader::find_local(model, model_path);
    let probe = ToWorker::Probe {
        model: model.to_string(),
        model_path: model_path.map(|p| p.display().to_string()),
    };
    let answers = cluster.broadcast(&probe).and_then(|_| {
        cluster.collect(
            "the model probe",
            Duration::from_secs(60),
            |rank, msg| match msg {
                ToLeader::Probed { model, free_memory } => {
                    Ok(Some((rank, model.clone(), *free_memory)))
                }
                _ => Ok(None),
            },
        )
    });
    let answers = match answers {
        Ok(a) => a,
        Err(e) => return report.fail(e.to_string(), "check the worker's log"),
    };
    let mut all = vec![(
        0,
        mine.map_err(|e| e.to_string()),
        backend::distributed::free_memory(),
    )];
    all.extend(answers);
    report_models(report, p, &all);
}

/// Every rank's copy of the model against rank 0's, and its memory against an even share.
fn report_models(report: &mut Report, p: &Probe, all: &[(usize, Result<ModelFound, String>, u64)]) {
    let model = p.model;
    let reference = all[0].1.as_ref().ok().cloned();
    let size = all.len() as u64;
    for (rank, found, free) in all {
        match (found, &reference) {
            (_, Some(r)) if p.ship_model && *rank > 0 => {
                report.ok(format!(
                    "rank {rank}: rank 0 ships its share of {model} (ship_model)"
                ));
                report_memory(report, *rank, *free, r.weight_bytes / size);
            }
            (Err(why), _) => report.fail(
                format!("rank {rank}: {why}"),
                format!("put {model} on rank {rank} (the same folder, or download it there first)"),
            ),
            (Ok(m), Some(r)) if m.fingerprint != r.fingerprint => report.fail(
                format!("rank {rank}: its {model} differs from rank 0's (config or weights)"),
                "copy the same model folder to every rank",
            ),
            (Ok(m), _) => {
                report.ok(format!("rank {rank}: has {model} ({})", gb(m.weight_bytes)));
                report_memory(report, *rank, *free, m.weight_bytes / size);
            }
        }
    }
}

/// A rank's free memory against an even share of the weights, with a fifth to spare.
fn report_memory(report: &mut Report, rank: usize, free: u64, share: u64) {
    match free >= share + share / 5 {
        true => report.ok(format!(
            "rank {rank}: {} free for an even share of {}",
            gb(free),
            gb(share)
        )),
        false => report.fail(
            format!(
                "rank {rank}: {} free, an even share is {}",
                gb(free),
                gb(share)
            ),
            "give it fewer layers (layer_split), add a rank, or use a smaller quantization",
        ),
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}
