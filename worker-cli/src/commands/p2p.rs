//! `worker p2p-mlx`: nodes on one LAN find each other over mDNS/DNS-SD (no hostfile), agree
//! on ranks, write the hostfile and join. Every node advertises its ring address with an
//! HMAC of the shared token; nodes without the token are ignored (and could not pass the
//! control channel's token handshake anyway). Rank 0 is the node started with `--serve`; the
//! others take ranks in the order of their node ids, so every node computes the same list.

use std::collections::BTreeMap;
use std::net::{IpAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use backend::distributed::wire::{nonce, Secret};
use mdns_sd::{ServiceDaemon, ServiceEvent, ServiceInfo};

use super::distributed::{run_rank, RankOptions};
use super::CliResult;
use crate::args::P2pArgs;

const SERVICE: &str = "_mlx-dist._tcp.local.";

/// One node as it advertises itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    id: String,
    ring: String,
    serves: bool,
}

impl Node {
    fn message(&self) -> String {
        format!("{}|{}|{}", self.id, self.ring, self.serves)
    }
}

pub fn run(args: P2pArgs) -> CliResult {
    if args.token.len() < 8 {
        return Err("--token must have at least 8 characters (it authenticates the nodes)".into());
    }
    if args.ranks < 2 {
        return Err("--ranks must be at least 2".into());
    }
    let yaml = super::config::read(args.config.as_deref())?;
    let secret = Secret::new(Some(&args.token), "");
    let group = secret.proof("p2p-group", "")[..16].to_string();
    let ip = match &args.ip {
        Some(ip) => ip
            .parse::<IpAddr>()
            .map_err(|e| format!("--ip {ip}: {e}"))?,
        None => outward_ip()?,
    };
    let port = match args.port {
        Some(p) => p,
        None => free_port_pair(ip)?,
    };
    let me = Node {
        id: nonce()[..12].to_string(),
        ring: format!("{ip}:{port}"),
        serves: args.serve.is_some(),
    };
    tracing::info!(node = %me.id, ring = %me.ring, "looking for {} nodes", args.ranks);
    let mdns = ServiceDaemon::new()?;
    advertise(&mdns, &me, &group, &secret, ip, port)?;
    let nodes = discover(&mdns, &me, &group, &secret, &args)?;
    let ranks = agree(nodes)?;
    let rank = ranks
        .iter()
        .position(|n| n.id == me.id)
        .expect("we are in it");
    let addrs: Vec<&str> = ranks.iter().map(|n| n.ring.as_str()).collect();
    let hostfile = args
        .hostfile_out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("mlx-p2p-{group}.json")));
    std::fs::write(&hostfile, serde_json::to_string(&addrs)?)?;
    eprintln!(
        "p2p: rank {rank} of {} ({}); hostfile {}",
        ranks.len(),
        addrs.join(" "),
        hostfile.display()
    );
    run_rank(RankOptions {
        preload: (rank == 0).then(|| yaml.preload(&hostfile)).flatten(),
        hostfile,
        rank,
        backend: "ring".into(),
        addr: args.serve.unwrap_or_default(),
        coordinator: None,
        control_port: None,
        // The control channel's handshake uses the same token.
        token: Some(args.token),
    })
}

/// The address other machines reach this one at: the source of a route to the LAN.
fn outward_ip() -> CliResult<IpAddr> {
    let probe = UdpSocket::bind("0.0.0.0:0")?;
    probe.connect("224.0.0.251:5353")?;
    Ok(probe.local_addr()?.ip())
}

/// A free port whose successor is free too (rank 0's control channel).
fn free_port_pair(ip: IpAddr) -> CliResult<u16> {
    for _ in 0..100 {
        let port = TcpListener::bind((ip, 0))?.local_addr()?.port();
        if port < u16::MAX && TcpListener::bind((ip, port + 1)).is_ok() {
            return Ok(port);
        }
    }
    Err("no free pair of ports".into())
}

fn advertise(
    mdns: &ServiceDaemon,
    me: &Node,
    group: &str,
    secret: &Secret,
    ip: IpAddr,
    port: u16,
) -> CliResult {
    let tag = secret.proof("p2p-node", &me.message());
    let serves = if me.serves { "1" } else { "0" };
    let txt = [
        ("group", group),
        ("node", me.id.as_str()),
        ("ring", me.ring.as_str()),
        ("serve", serves),
        ("tag", tag.as_str()),
    ];
    let host = format!("mlx-{}.local.", me.id);
    let info = ServiceInfo::new(SERVICE, &me.id, &host, ip, port, &txt[..])?;
    mdns.register(info)?;
    Ok(())
}

/// Browses until `args.ranks` nodes of this group (this one included) are known.
fn discover(
    mdns: &ServiceDaemon,
    me: &Node,
    group: &str,
    secret: &Secret,
    args: &P2pArgs,
) -> CliResult<Vec<Node>> {
    let events = mdns.browse(SERVICE)?;
    let mut known: BTreeMap<String, Node> = BTreeMap::from([(me.id.clone(), me.clone())]);
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    while known.len() < args.ranks {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "found {} of {} nodes with this token within {} s: start `worker p2p-mlx` with \
                 the same --token on the others, on the same LAN (mDNS, UDP 5353)",
                known.len(),
                args.ranks,
                args.timeout
            )
            .into());
        }
        let Ok(event) = events.recv_timeout(left.min(Duration::from_millis(500))) else {
            continue;
        };
        let ServiceEvent::ServiceResolved(info) = event else {
            continue;
        };
        let get = |k: &str| info.get_property_val_str(k).unwrap_or_default().to_string();
        if get("group") != group {
            continue;
        }
        let node = Node {
            id: get("node"),
            ring: get("ring"),
            serves: get("serve") == "1",
        };
        if !secret.verify("p2p-node", &node.message(), &get("tag")) {
            tracing::warn!(node = %node.id, "ignored a node whose tag does not match the token");
            continue;
        }
        if known.insert(node.id.clone(), node.clone()).is_none() {
            tracing::info!(node = %node.id, ring = %node.ring, "found a node");
        }
    }
    Ok(known.into_values().collect())
}

/// Rank 0 is the one node that serves gRPC; the others follow in node-id order.
fn agree(nodes: Vec<Node>) -> CliResult<Vec<Node>> {
    let (mut servers, mut others): (Vec<Node>, Vec<Node>) =
        nodes.into_iter().partition(|n| n.serves);
    others.sort_by(|a, b| a.id.cmp(&b.id));
    if servers.len() != 1 {
        return Err(format!(
            "{} nodes were started with --serve; exactly one must be (it becomes rank 0)",
            servers.len()
        )
        .into());
    }
    let mut ranks = vec![servers.remove(0)];
    ranks.extend(others);
    Ok(ranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, serves: bool) -> Node {
        Node {
            id: id.into(),
            ring: format!("10.0.0.{}:5000", id.len()),
            serves,
        }
    }

    #[test]
    fn the_server_is_rank_0_and_the_rest_follow_by_id() {
        let ranks = agree(vec![node("c", false), node("b", true), node("a", false)]).unwrap();
        let ids: Vec<&str> = ranks.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "c"]);
        assert!(agree(vec![node("a", false), node("b", false)]).is_err());
        assert!(agree(vec![node("a", true), node("b", true)]).is_err());
    }
}
