//! Peer-to-peer clusters without a hostfile, as LocalAI documents them: workers advertise
//! themselves over mDNS with an HMAC of the shared token and network id; rank 0 browses for
//! them, gives ranks in node-id order (itself rank 0), hands each worker its rank and the
//! hostfile over an authenticated connection, and forms the cluster as with a hostfile.

mod assign;
mod browse;
mod jaccl;

use std::net::{IpAddr, TcpListener, UdpSocket};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::wire::Secret;
use super::Transport;

pub use assign::{assign, await_assignment, Assignment};
pub use browse::{browse, Advert, Wanted, MAX_P2P_WAIT_SECS};
pub use jaccl::device_matrix;

/// The DNS-SD service every node advertises.
pub const SERVICE: &str = "_mlx-dist._tcp.local.";

/// Tokens shorter than this are refused: the token is the only thing keeping strangers out.
pub const MIN_TOKEN_LEN: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum P2pError {
    #[error("mDNS: {0}")]
    Mdns(#[from] mdns_sd::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The settings or what was found cannot form a cluster.
    #[error("{0}")]
    Cluster(String),
    /// The browse was ended early (its caller left, or a stop): the caller knows why.
    #[error("the browse for workers was given up")]
    GaveUp,
}

pub type Result<T> = std::result::Result<T, P2pError>;

/// Who may join: the holders of one token on one network id.
#[derive(Clone)]
pub struct Network {
    secret: Secret,
    /// A tag of the token and network id that nodes advertise, so others skip them cheaply.
    group: String,
}

impl Network {
    pub fn new(token: &str, network_id: &str) -> Result<Network> {
        if token.len() < MIN_TOKEN_LEN {
            return Err(P2pError::Cluster(format!(
                "the P2P token must have at least {MIN_TOKEN_LEN} characters (it authenticates the nodes)"
            )));
        }
        let secret = Secret::new(Some(token), "");
        let group = secret.proof("p2p-group", network_id)[..16].to_string();
        Ok(Network { secret, group })
    }

    fn tag(&self, node: &Node) -> String {
        self.secret.proof("p2p-node", &node.message(&self.group))
    }

    fn verify(&self, node: &Node, tag: &str) -> bool {
        self.secret
            .verify("p2p-node", &node.message(&self.group), tag)
    }
}

/// One worker as it advertises itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    /// Its MLX ring address (`ip:port`).
    pub ring: String,
    /// Where it takes its assignment (`ip:port`).
    pub assign: String,
    /// Its RDMA devices (JACCL), in the order it lists them.
    pub rdma: Vec<String>,
}

impl Node {
    /// What the node's tag signs: everything a peer acts on.
    fn message(&self, group: &str) -> String {
        format!(
            "{group}|{}|{}|{}|{}",
            self.id,
            self.ring,
            self.assign,
            self.rdma.join(",")
        )
    }

    /// The host part of its ring address, for logs and errors.
    pub fn host(&self) -> &str {
        self.ring.rsplit_once(':').map_or(&self.ring, |(h, _)| h)
    }
}

/// The ring hostfile (LocalAI's list of `ip:port`) for rank 0 at `own` and `workers` after it.
pub fn ring_hostfile(own: &str, workers: &[Node]) -> String {
    let ranks: Vec<&str> = std::iter::once(own)
        .chain(workers.iter().map(|n| n.ring.as_str()))
        .collect();
    serde_json::Value::from(ranks).to_string()
}

/// The cluster rank 0 lays out for the workers it found.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// The hostfile's JSON as every rank reads it (LocalAI's ring list or JACCL matrix).
    pub json: String,
    /// JACCL: rank 0's coordinator (its own address).
    pub coordinator: Option<String>,
}

/// Rank 0 (at `own`, with RDMA devices `own_rdma`) and `workers` after it, for `transport`.
pub fn layout(
    transport: Transport,
    own: &str,
    own_rdma: &[String],
    workers: &[Node],
) -> Result<Layout> {
    match transport {
        Transport::Jaccl => {
            let advertised: Vec<Vec<String>> = std::iter::once(own_rdma.to_vec())
                .chain(workers.iter().map(|n| n.rdma.clone()))
                .collect();
            let matrix = device_matrix(&advertised)?;
            Ok(Layout {
                json: serde_json::to_string(&matrix)
                    .map_err(|e| P2pError::Cluster(e.to_string()))?,
                coordinator: Some(own.to_string()),
            })
        }
        _ => Ok(Layout {
            json: ring_hostfile(own, workers),
            coordinator: None,
        }),
    }
}

/// This node's RDMA devices: `given`, else the kernel's list (none off RDMA hardware).
pub fn rdma_devices(given: &[String]) -> Vec<String> {
    if !given.is_empty() {
        return given.to_vec();
    }
    let mut found: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// The address other machines reach this one at: the source of a route to the mDNS group,
/// else (no such route) the first IPv4 address off loopback.
pub fn outward_ip() -> Result<IpAddr> {
    let routed = UdpSocket::bind("0.0.0.0:0").and_then(|probe| {
        probe.connect("224.0.0.251:5353")?;
        Ok(probe.local_addr()?.ip())
    });
    if let Ok(ip) = routed {
        return Ok(ip);
    }
    if_addrs::get_if_addrs()?
        .into_iter()
        .find(|i| !i.is_loopback() && i.ip().is_ipv4())
        .map(|i| i.ip())
        .ok_or_else(|| P2pError::Cluster("no network address off loopback".into()))
}

/// A free port on `ip` whose successor is free too (rank 0's control channel).
pub fn free_port_pair(ip: IpAddr) -> Result<u16> {
    for _ in 0..100 {
        let port = TcpListener::bind((ip, 0))?.local_addr()?.port();
        if port < u16::MAX && TcpListener::bind((ip, port + 1)).is_ok() {
            return Ok(port);
        }
    }
    Err(P2pError::Cluster("no free pair of ports".into()))
}

/// This process's ring address as rank 0: `given`, else chosen once (the outward address and
/// a free port pair) and kept, so that loading again over the same workers gives the same
/// hostfile and reuses the cluster.
pub fn own_ring(given: Option<&str>) -> Result<String> {
    static CHOSEN: OnceLock<String> = OnceLock::new();
    if let Some(g) = given {
        return Ok(g.to_string());
    }
    if let Some(c) = CHOSEN.get() {
        return Ok(c.clone());
    }
    let ip = outward_ip()?;
    let port = free_port_pair(ip)?;
    Ok(CHOSEN.get_or_init(|| format!("{ip}:{port}")).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> Node {
        Node {
            id: id.into(),
            ring: format!("10.0.0.{}:5555", id.len()),
            assign: "10.0.0.1:7000".into(),
            rdma: vec![],
        }
    }

    #[test]
    fn tags_bind_the_token_the_network_and_the_node() -> Result<()> {
        let net = Network::new("a-long-token", "net")?;
        let n = node("abc");
        let tag = net.tag(&n);
        assert!(net.verify(&n, &tag));
        assert!(!Network::new("a-long-token", "other")?.verify(&n, &tag));
        assert!(!Network::new("another-token", "net")?.verify(&n, &tag));
        let moved = Node {
            ring: "10.0.0.9:5555".into(),
            ..n
        };
        assert!(!net.verify(&moved, &tag));
        assert!(Network::new("short", "").is_err());
        Ok(())
    }

    #[test]
    fn jaccl_rank_0_writes_the_matrix_of_the_devices_found() -> Result<()> {
        let worker = |id: &str, devs: &[&str]| Node {
            rdma: devs.iter().map(|d| d.to_string()).collect(),
            ..node(id)
        };
        let own = ["rdma_en1".to_string(), "rdma_en2".to_string()];
        let workers = [
            worker("a", &["rdma_en3", "rdma_en4"]),
            worker("b", &["rdma_en5", "rdma_en6"]),
        ];
        let l = layout(Transport::Jaccl, "10.0.0.1:5000", &own, &workers)?;
        assert_eq!(
            l.json,
            r#"[[null,"rdma_en1","rdma_en2"],["rdma_en3",null,"rdma_en4"],["rdma_en5","rdma_en6",null]]"#
        );
        assert_eq!(l.coordinator.as_deref(), Some("10.0.0.1:5000"));
        let parsed = crate::distributed::Hostfile::parse(&l.json, Transport::Jaccl);
        assert!(parsed.is_ok_and(|h| h.size() == 3));
        let too_few = [worker("a", &["rdma_en3"]), worker("b", &["x", "y"])];
        assert!(layout(Transport::Jaccl, "10.0.0.1:5000", &own, &too_few).is_err());
        let ring = layout(Transport::Ring, "10.0.0.1:5000", &[], &workers)?;
        assert_eq!(ring.coordinator, None);
        Ok(())
    }

    #[test]
    fn the_hostfile_lists_rank_0_then_the_workers() {
        let text = ring_hostfile("10.0.0.1:5000", &[node("a"), node("bb")]);
        assert_eq!(text, r#"["10.0.0.1:5000","10.0.0.1:5555","10.0.0.2:5555"]"#);
        assert_eq!(node("a").host(), "10.0.0.1");
    }
}
