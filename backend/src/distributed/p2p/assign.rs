//! Rank 0 gives each worker its rank: the worker opens with a fresh nonce, rank 0 answers
//! with the rank, the hostfile and its control address, signed with the token over that
//! nonce (so an assignment can be neither forged nor replayed), and the worker acknowledges.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Network, Node, P2pError, Result};
use crate::distributed::wire::{nonce, read_frame, write_frame, Deadline};

/// Every step of an assignment ends within this (a worker leaving the cluster rank 0 just
/// closed takes a moment before it answers).
const STEP: Duration = Duration::from_secs(10);

/// An assignment frame (a hostfile of a few hundred nodes) is read through this bound.
const FRAME_MAX_BYTES: u64 = 1 << 20;

/// What a worker is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub rank: usize,
    /// The hostfile's JSON, as every rank reads it.
    pub hostfile: String,
    /// Rank 0's control address.
    pub control: String,
    /// JACCL: rank 0's coordinator.
    pub coordinator: Option<String>,
}

#[derive(Serialize, Deserialize)]
enum Frame {
    Hello {
        node: String,
        nonce: String,
    },
    Assign {
        assignment: Assignment,
        proof: String,
    },
    Taken,
}

fn signed(nonce: &str, a: &Assignment) -> String {
    let coordinator = a.coordinator.as_deref().unwrap_or_default();
    format!(
        "{nonce}|{}|{}|{coordinator}|{}",
        a.rank, a.control, a.hostfile
    )
}

/// Tells each worker its rank (`workers[i]` is rank i + 1) in `cluster` (its rank field is
/// set per worker); the error names the rank and host.
pub fn assign(net: &Network, workers: &[Node], cluster: &Assignment) -> Result<()> {
    for (i, worker) in workers.iter().enumerate() {
        let assignment = Assignment {
            rank: i + 1,
            ..cluster.clone()
        };
        assign_one(net, worker, &assignment).map_err(|e| {
            P2pError::Cluster(format!(
                "rank {} ({}) could not be given its rank: {e}",
                i + 1,
                worker.host()
            ))
        })?;
    }
    Ok(())
}

fn assign_one(net: &Network, worker: &Node, assignment: &Assignment) -> Result<()> {
    let addr: SocketAddr = worker
        .assign
        .parse()
        .map_err(|_| P2pError::Cluster(format!("bad address {}", worker.assign)))?;
    let mut s = TcpStream::connect_timeout(&addr, STEP)?;
    s.set_read_timeout(Some(STEP))?;
    s.set_write_timeout(Some(STEP))?;
    let Frame::Hello { node, nonce } = read_frame(&mut s)? else {
        return Err(P2pError::Cluster("it did not say hello".into()));
    };
    if node != worker.id {
        return Err(P2pError::Cluster(format!(
            "another node ({node}) answers at {}",
            worker.assign
        )));
    }
    let proof = net.secret.proof("p2p-assign", &signed(&nonce, assignment));
    let assignment = assignment.clone();
    write_frame(&mut s, &Frame::Assign { assignment, proof })?;
    match read_frame(&mut s)? {
        Frame::Taken => Ok(()),
        _ => Err(P2pError::Cluster("it did not take the rank".into())),
    }
}

/// Assignment attempts a worker runs at once; a newer one ends the oldest, so strangers
/// cannot keep rank 0's attempt out.
const MAX_ATTEMPTS: usize = 16;

/// The attempts in flight: each one's socket (to end it) and thread.
type Attempts = Vec<(TcpStream, std::thread::JoinHandle<()>)>;

/// A worker waits for a rank 0 of its network to give it a rank (until a stop is requested:
/// then `None`). Each connection is served on its own thread within `STEP` in all, so a slow
/// stranger cannot hold up rank 0's assignment; connections without a valid proof are
/// logged and ignored.
pub fn await_assignment(
    listener: &TcpListener,
    net: &Network,
    me: &Node,
) -> Result<Option<Assignment>> {
    listener.set_nonblocking(true)?;
    let (sender, taken) = std::sync::mpsc::channel();
    let claimed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut attempts: Attempts = Vec::new();
    let got = loop {
        if crate::lifecycle::stop_requested() {
            break None;
        }
        if let Ok(a) = taken.try_recv() {
            break Some(a);
        }
        let (stream, from) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                end_all(attempts);
                return Err(e.into());
            }
        };
        attempts.retain(|(_, t)| !t.is_finished());
        if attempts.len() >= MAX_ATTEMPTS {
            let (oldest, _) = attempts.remove(0);
            let _ = oldest.shutdown(std::net::Shutdown::Both);
            if warn_now() {
                tracing::warn!("{MAX_ATTEMPTS} assignment attempts at once; ended the oldest");
            }
        }
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        let (net, me, sender, claimed) = (net.clone(), me.clone(), sender.clone(), claimed.clone());
        let thread = std::thread::spawn(move || {
            let taken = take(&stream, &net, &me, &claimed);
            // Closed now, not when the listener's copy of the socket is dropped.
            let _ = stream.shutdown(std::net::Shutdown::Both);
            match taken {
                Ok(a) => {
                    let _ = sender.send(a);
                }
                Err(e) if warn_now() => tracing::warn!(%from, "ignored an assignment: {e}"),
                Err(e) => tracing::debug!(%from, "ignored an assignment: {e}"),
            }
        });
        attempts.push((clone, thread));
    };
    end_all(attempts);
    Ok(got)
}

/// Whether a warning may be logged now: at most one a second, so a flood of strangers does
/// not flood the log.
fn warn_now() -> bool {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
    if now {
        *last = Some(std::time::Instant::now());
    }
    now
}

/// Ends the attempts still running and waits for their threads.
fn end_all(attempts: Attempts) {
    for (stream, thread) in attempts {
        let _ = stream.shutdown(std::net::Shutdown::Both);
        let _ = thread.join();
    }
}

/// One assignment attempt from a connecting rank 0, within `STEP` in all; `claimed` makes
/// sure only one attempt acknowledges.
fn take(
    mut s: &TcpStream,
    net: &Network,
    me: &Node,
    claimed: &std::sync::atomic::AtomicBool,
) -> Result<Assignment> {
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(STEP))?;
    let ours = nonce();
    write_frame(
        &mut s,
        &Frame::Hello {
            node: me.id.clone(),
            nonce: ours.clone(),
        },
    )?;
    let mut r = Deadline::new(s, STEP);
    let Frame::Assign { assignment, proof } = read_frame(&mut (&mut r).take(FRAME_MAX_BYTES))?
    else {
        return Err(P2pError::Cluster("the peer sent no assignment".into()));
    };
    if !net
        .secret
        .verify("p2p-assign", &signed(&ours, &assignment), &proof)
    {
        return Err(P2pError::Cluster(
            "its proof does not match the token (another token or network?)".into(),
        ));
    }
    if claimed.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(P2pError::Cluster(
            "another assignment was taken first".into(),
        ));
    }
    if let Err(e) = write_frame(&mut s, &Frame::Taken) {
        claimed.store(false, std::sync::atomic::Ordering::SeqCst);
        return Err(e.into());
    }
    Ok(assignment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(listener: &TcpListener) -> Result<Node> {
        Ok(Node {
            id: "w1".into(),
            ring: "127.0.0.1:5555".into(),
            assign: listener.local_addr()?.to_string(),
            rdma: vec![],
        })
    }

    #[test]
    fn a_worker_takes_a_rank_only_from_its_own_network() -> Result<()> {
        let net = Network::new("the-token-1", "n")?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let me = worker(&listener)?;
        let (n, m) = (net.clone(), me.clone());
        let waiting = std::thread::spawn(move || await_assignment(&listener, &n, &m));
        let want = Assignment {
            rank: 1,
            hostfile: "[\"a:1\",\"b:2\"]".into(),
            control: "a:2".into(),
            coordinator: None,
        };
        let stranger = Network::new("the-token-2", "n")?;
        assert!(assign(&stranger, std::slice::from_ref(&me), &want).is_err());
        assign(&net, std::slice::from_ref(&me), &want)?;
        let got = waiting
            .join()
            .map_err(|_| P2pError::Cluster("panicked".into()))??;
        assert_eq!(got, Some(want));
        Ok(())
    }
}
