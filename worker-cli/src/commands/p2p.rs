//! `worker p2p-mlx`, as LocalAI documents it: every node but one is a worker that advertises
//! itself over mDNS (an HMAC of the token and network id in its TXT record) and waits for a
//! rank 0 of its network to give it a rank; between clusters it waits again. The node started
//! with `--serve` is a rank 0 like the backend a host starts: it finds its workers at each
//! LoadModel (`backend::distributed::p2p`).

use std::net::{IpAddr, SocketAddr, TcpListener};

use backend::distributed::p2p::{self, Advert, Assignment, Network, Node};
use backend::distributed::wire::nonce;
use backend::distributed::{Hostfile, Transport};
use backend::engine::follower::{self, FollowerOptions, Membership};
use backend::options::Settings;
use backend::server::ServerOptions;

use super::CliResult;
use crate::args::P2pArgs;

/// Where LocalAI's workers find the token, in its order (then ours).
const TOKEN_VARS: [&str; 4] = [
    "LOCALAI_TOKEN",
    "LOCALAI_P2P_TOKEN",
    "TOKEN",
    "MLX_DISTRIBUTED_TOKEN",
];
const NETWORK_VARS: [&str; 2] = ["LOCALAI_P2P_NETWORK_ID", "P2P_NETWORK_ID"];

fn first_var(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
}

pub fn run(args: P2pArgs) -> CliResult {
    let token = args
        .token
        .clone()
        .or_else(|| first_var(&TOKEN_VARS))
        .ok_or(
        "no token: give --token, or set LOCALAI_TOKEN / LOCALAI_P2P_TOKEN / TOKEN as LocalAI does",
    )?;
    let network_id = args
        .p2p_network_id
        .clone()
        .or_else(|| first_var(&NETWORK_VARS))
        .unwrap_or_default();
    let net = Network::new(&token, &network_id)?;
    if args.ranks.is_some_and(|n| n < 2) {
        return Err("--ranks must be at least 2".into());
    }
    let yaml = super::config::read(args.config.as_deref())?;
    let ip = match &args.ip {
        Some(ip) => ip
            .parse::<IpAddr>()
            .map_err(|e| format!("--ip {ip}: {e}"))?,
        None => p2p::outward_ip()?,
    };
    match args.serve.clone() {
        Some(addr) => {
            let settings = serve_settings(&args, &token, &network_id, ip);
            backend::server::run(ServerOptions {
                settings,
                addr,
                preload: yaml.without_hostfile(),
            })
        }
        None => work(&args, &net, &token, ip),
    }
}

/// Rank 0's LoadModel settings: P2P with this node's token, network and ring address, and
/// no hostfile from the environment.
fn serve_settings(args: &P2pArgs, token: &str, network_id: &str, ip: IpAddr) -> Settings {
    let mut s = Settings::default()
        .option("hostfile", "")
        .option("p2p_token", token)
        .option("p2p_network_id", network_id)
        .with(
            "MLX_P2P_RING",
            SocketAddr::new(ip, args.mlx_listen_port).to_string(),
        )
        .option("distributed_backend", args.mlx_backend.clone());
    if !args.rdma_devices.is_empty() {
        s = s.with("MLX_P2P_RDMA_DEVICES", args.rdma_devices.join(","));
    }
    if let Some(n) = args.ranks {
        s = s.option("p2p_ranks", n.to_string());
    }
    if let Some(t) = args.timeout {
        s = s.option("p2p_wait", t.to_string());
    }
    s
}

/// A worker: advertise, take a rank, follow that rank 0 until it closes the cluster, repeat.
fn work(args: &P2pArgs, net: &Network, token: &str, ip: IpAddr) -> CliResult {
    backend::lifecycle::watch_signals()?;
    let transport = match args.mlx_backend.as_str() {
        "jaccl" => Transport::Jaccl,
        _ => Transport::Ring,
    };
    let listener = TcpListener::bind((ip, 0))?;
    let me = Node {
        id: nonce()[..12].to_string(),
        ring: SocketAddr::new(ip, args.mlx_listen_port).to_string(),
        assign: listener.local_addr()?.to_string(),
        rdma: match transport {
            Transport::Jaccl => p2p::rdma_devices(&args.rdma_devices),
            _ => Vec::new(),
        },
    };
    // Advertised while it serves too: its own rank 0 finds it again when it loads anew (and
    // another rank 0 that tries to assign it names it when it does not answer).
    let _advert = Advert::start(net, &me, ip)?;
    loop {
        eprintln!(
            "p2p: node {} ({}) waiting for a rank 0 with this token",
            me.id, me.ring
        );
        let Some(assignment) = p2p::await_assignment(&listener, net, &me)? else {
            return Ok(());
        };
        if let Err(e) = follow(args, &assignment, transport, token) {
            tracing::warn!("the cluster ended: {e}");
        }
        if backend::lifecycle::stop_requested() {
            return Ok(());
        }
    }
}

/// Serves the rank 0 that assigned this node until it closes the cluster.
fn follow(args: &P2pArgs, a: &Assignment, transport: Transport, token: &str) -> CliResult {
    let hostfile = Hostfile::parse(&a.hostfile, transport)?;
    eprintln!(
        "p2p: rank {} of {} ({}); rank 0's control channel {}",
        a.rank,
        hostfile.size(),
        hostfile.rank_addresses().join(" "),
        a.control
    );
    if let Some(path) = &args.hostfile_out {
        std::fs::write(path, &a.hostfile)?;
    }
    let control_port = a
        .control
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| format!("rank 0 sent a bad control address {}", a.control))?;
    let span = tracing::info_span!("rank", n = a.rank);
    let _enter = span.enter();
    follower::run(&FollowerOptions {
        rank: a.rank,
        hostfile,
        coordinator: a.coordinator.clone(),
        control_port: Some(control_port),
        token: Some(token.to_string()),
        membership: Membership::Assigned,
    })?;
    Ok(())
}
