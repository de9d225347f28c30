//! Rank 0's LoadModel without a hostfile: find the workers of its P2P network, write the
//! hostfile of rank 0 and them, and (when that is not the cluster already formed) give each
//! worker its rank before the cluster forms as it would with a hostfile.

use std::time::Duration;

use crate::distributed::p2p::{self, Assignment, Network, Node, Wanted, MAX_P2P_WAIT_SECS};
use crate::distributed::{GiveUp, Hostfile, Transport};
use crate::error::{Error, Result};
use crate::options::P2pConfig;

/// The cluster discovery found, not yet told.
pub struct Found {
    pub hostfile: Hostfile,
    net: Network,
    workers: Vec<Node>,
    /// What every worker is told, but its rank.
    cluster: Assignment,
}

fn p2p_error(e: p2p::P2pError) -> Error {
    Error::Distributed(e.to_string())
}

/// `p2p_wait` within `MAX_P2P_WAIT_SECS`, or an error naming both.
pub fn check_wait(config: &P2pConfig) -> Result<()> {
    match config.wait_secs > MAX_P2P_WAIT_SECS {
        true => Err(Error::InvalidRequest(format!(
            "p2p_wait is {} s, above its limit of {MAX_P2P_WAIT_SECS} s",
            config.wait_secs
        ))),
        false => Ok(()),
    }
}

/// Browses for the workers `config` asks for and lays out the cluster over `transport` with
/// this process first; `give_up` (and a stop) ends the browse at its next tick.
pub fn discover(config: &P2pConfig, transport: Transport, give_up: GiveUp<'_>) -> Result<Found> {
    check_wait(config)?;
    let net = Network::new(&config.token.0, &config.network_id).map_err(p2p_error)?;
    let wanted = Wanted {
        ranks: config.ranks,
        wait: Duration::from_secs(config.wait_secs),
    };
    let gave_up = std::cell::RefCell::new(None);
    let stop = || {
        let why =
            give_up().or_else(|| crate::lifecycle::stop_requested().then_some(Error::ShuttingDown));
        let stop = why.is_some();
        *gave_up.borrow_mut() = why;
        stop
    };
    let workers = match p2p::browse(&net, wanted, &stop) {
        Err(p2p::P2pError::GaveUp) => {
            return Err(gave_up.take().unwrap_or(Error::ShuttingDown));
        }
        other => other.map_err(p2p_error)?,
    };
    let own = p2p::own_ring(config.ring.as_deref()).map_err(p2p_error)?;
    let own_rdma = match transport {
        Transport::Jaccl => p2p::rdma_devices(&config.rdma_devices),
        _ => Vec::new(),
    };
    let layout = p2p::layout(transport, &own, &own_rdma, &workers).map_err(p2p_error)?;
    let json = layout.json;
    let mut hostfile = Hostfile::parse(&json, transport)
        .map_err(|e| Error::Distributed(format!("the discovered hostfile {json}: {e}")))?;
    if let Hostfile::Jaccl { coordinator, .. } = &mut hostfile {
        coordinator.clone_from(&layout.coordinator);
    }
    let control = hostfile
        .control_address(None, None)
        .map_err(Error::Distributed)?;
    let hosts: Vec<String> = std::iter::once(own.clone())
        .chain(workers.iter().map(|w| format!("{} ({})", w.ring, w.id)))
        .enumerate()
        .map(|(rank, h)| format!("rank {rank}: {h}"))
        .collect();
    tracing::info!("P2P cluster: {}", hosts.join(", "));
    Ok(Found {
        hostfile,
        net,
        workers,
        cluster: Assignment {
            rank: 0,
            hostfile: json,
            control,
            coordinator: layout.coordinator,
        },
    })
}

impl Found {
    /// Gives each worker its rank, the hostfile and rank 0's control address.
    pub fn assign(&self) -> Result<()> {
        p2p::assign(&self.net, &self.workers, &self.cluster).map_err(p2p_error)
    }
}
