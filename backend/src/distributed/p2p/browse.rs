//! mDNS both ways: a worker's advertisement, and rank 0's browse for the workers of its
//! network.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use mdns_sd::{ResolvedService, ServiceDaemon, ServiceEvent, ServiceInfo};

use super::{Network, Node, P2pError, Result, SERVICE};

/// A worker's advertisement, withdrawn when dropped.
pub struct Advert {
    daemon: ServiceDaemon,
    fullname: String,
}

impl Advert {
    /// Advertises `node` (reachable at `ip`) to the LAN.
    pub fn start(net: &Network, node: &Node, ip: IpAddr) -> Result<Advert> {
        let daemon = ServiceDaemon::new()?;
        let tag = net.tag(node);
        let rdma = node.rdma.join(",");
        let txt = [
            ("group", net.group.as_str()),
            ("node", node.id.as_str()),
            ("ring", node.ring.as_str()),
            ("assign", node.assign.as_str()),
            ("rdma", rdma.as_str()),
            ("tag", tag.as_str()),
        ];
        let port = port_of(&node.assign)?;
        let host = format!("mlx-{}.local.", node.id);
        let info = ServiceInfo::new(SERVICE, &node.id, &host, ip, port, &txt[..])?;
        let fullname = info.get_fullname().to_string();
        daemon.register(info)?;
        Ok(Advert { daemon, fullname })
    }
}

impl Drop for Advert {
    fn drop(&mut self) {
        let _ = self.daemon.unregister(&self.fullname);
        let _ = self.daemon.shutdown();
    }
}

fn port_of(addr: &str) -> Result<u16> {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| P2pError::Cluster(format!("{addr}: expected ip:port")))
}

/// The longest `p2p_wait`: a load browses for its workers at most ten minutes.
pub const MAX_P2P_WAIT_SECS: u64 = 600;

/// How many workers rank 0 waits for.
#[derive(Debug, Clone, Copy)]
pub struct Wanted {
    /// Ranks in all, rank 0 included: wait for exactly these (an error after `wait`). None:
    /// take whoever is there after `wait` (at least one worker).
    pub ranks: Option<usize>,
    pub wait: Duration,
}

/// The workers of `net` on the LAN, in node-id order (the order of their ranks). `give_up`
/// (or a stop) ends the browse at its next tick with `P2pError::GaveUp`.
pub fn browse(net: &Network, wanted: Wanted, give_up: &dyn Fn() -> bool) -> Result<Vec<Node>> {
    if wanted.wait.as_secs() > MAX_P2P_WAIT_SECS {
        return Err(P2pError::Cluster(format!(
            "p2p_wait is {} s, above its limit of {MAX_P2P_WAIT_SECS} s",
            wanted.wait.as_secs()
        )));
    }
    let daemon = ServiceDaemon::new()?;
    let found = collect(&daemon, net, wanted, give_up);
    let _ = daemon.shutdown();
    let found = found?;
    let names = || {
        let hosts: Vec<String> = found.values().map(|n| n.ring.clone()).collect();
        match hosts.is_empty() {
            true => "none".to_string(),
            false => hosts.join(", "),
        }
    };
    let secs = wanted.wait.as_secs();
    match wanted.ranks {
        Some(n) if found.len() + 1 < n => Err(P2pError::Cluster(format!(
            "p2p_ranks is {n}, but only {} of them were found within {secs} s (this rank 0 \
             and the workers at: {}); start `worker p2p-mlx` with the same token and network \
             id on the others, on the same LAN (mDNS, UDP 5353)",
            found.len() + 1,
            names()
        ))),
        _ if found.is_empty() => Err(P2pError::Cluster(format!(
            "no worker with this token and network id was found within {secs} s; start \
             `worker p2p-mlx` with the same token on the others, on the same LAN (mDNS, UDP 5353)"
        ))),
        _ => Ok(found.into_values().collect()),
    }
}

/// How often the browse looks at its deadline, `give_up` and a stop between mDNS events.
const BROWSE_TICK: Duration = Duration::from_millis(50);

/// Browses until `wanted` is met or its wait is over: the verified workers by node id.
fn collect(
    daemon: &ServiceDaemon,
    net: &Network,
    wanted: Wanted,
    give_up: &dyn Fn() -> bool,
) -> Result<BTreeMap<String, Node>> {
    let events = daemon.browse(SERVICE)?;
    let deadline = Instant::now() + wanted.wait;
    let mut found: BTreeMap<String, Node> = BTreeMap::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    loop {
        if wanted.ranks.is_some_and(|n| found.len() + 1 >= n) {
            return Ok(found);
        }
        if give_up() || crate::lifecycle::stop_requested() {
            return Err(P2pError::GaveUp);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(found);
        }
        match events.recv_timeout(left.min(BROWSE_TICK)) {
            Ok(ServiceEvent::ServiceResolved(info)) => {
                if let Some(node) = verified(net, &info) {
                    if found.insert(node.id.clone(), node.clone()).is_none() {
                        tracing::info!(node = %node.id, ring = %node.ring, "found a worker");
                    }
                    names.insert(info.get_fullname().to_string(), node.id);
                }
            }
            Ok(ServiceEvent::ServiceRemoved(_, fullname)) => {
                if let Some(id) = names.remove(&fullname) {
                    tracing::info!(node = %id, "a worker left");
                    found.remove(&id);
                }
            }
            _ => {}
        }
    }
}

/// The node an advertisement describes, if it belongs to `net` and its tag proves it.
fn verified(net: &Network, info: &ResolvedService) -> Option<Node> {
    let get = |k: &str| info.get_property_val_str(k).unwrap_or_default().to_string();
    if get("group") != net.group {
        return None;
    }
    let rdma = get("rdma");
    let node = Node {
        id: get("node"),
        ring: get("ring"),
        assign: get("assign"),
        rdma: rdma
            .split(',')
            .filter(|d| !d.is_empty())
            .map(str::to_string)
            .collect(),
    };
    if !net.verify(&node, &get("tag")) {
        tracing::warn!(node = %node.id, "ignored a node whose tag does not match the token");
        return None;
    }
    Some(node)
}
