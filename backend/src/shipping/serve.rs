//! Rank 0's shipping server for one LoadModel: a listener beside the control channel, one
//! thread per connection, each authenticated by the control channel's secret within a whole
//! handshake deadline before it is sent a byte of the model. Strangers are bounded apart from
//! workers, so a crowd of them cannot take a worker's place.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Ask, Hello, Leader, Proof, CHUNK, CORRUPT_ENV, HANDSHAKE_LIMIT, HANDSHAKE_MAX_BYTES};
use super::{HANDSHAKES_ENV, MAX_HANDSHAKES, PORT_ENV};
use crate::distributed::protocol::{ShipItem, Shipment};
use crate::distributed::wire::{nonce, read_frame, write_frame, Deadline, Secret};
use crate::error::{Error, Result};
use crate::listener::RateLimited;

/// A listener on the control channel's host (workers reach rank 0 there) at a free port, or
/// at `MLX_DISTRIBUTED_SHIP_PORT` (a firewall's open port), and the address workers are told.
pub fn listen(control: &str) -> Result<(TcpListener, String)> {
    let host = control.rsplit_once(':').map_or(control, |(h, _)| h);
    let port = match std::env::var(PORT_ENV).ok().filter(|p| !p.is_empty()) {
        None => 0,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
            Error::Distributed(format!("{PORT_ENV}={p:?}: not a port from 1 to 65535"))
        })?,
    };
    let listener = TcpListener::bind((host.trim_matches(['[', ']']), port)).map_err(|e| {
        Error::Distributed(format!("shipping: cannot listen on {host}:{port}: {e}"))
    })?;
    let port = listener.local_addr()?.port();
    Ok((listener, format!("{host}:{port}")))
}

/// What the server ships: the model folder, and each worker's share by rank.
pub struct Shares {
    pub dir: PathBuf,
    pub by_rank: HashMap<usize, Shipment>,
    /// The control channel's secret, which workers prove again.
    pub secret: Secret,
    /// The test hook's item name ([`corrupt_hook`]).
    pub corrupt: Option<String>,
}

/// `MLX_DISTRIBUTED_SHIP_CORRUPT`, logged when set.
pub fn corrupt_hook() -> Option<String> {
    let corrupt = std::env::var(CORRUPT_ENV).ok().filter(|c| !c.is_empty());
    if let Some(name) = &corrupt {
        tracing::warn!(item = %name, "test hook: shipping corrupts this item");
    }
    corrupt
}

/// Serves shares until dropped (the load is over).
pub struct Shipper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Shipper {
    /// Serves `shares` on `listener`, with `MLX_DISTRIBUTED_SHIP_HANDSHAKES` (else 64)
    /// handshakes at once.
    pub fn start(listener: TcpListener, shares: Shares) -> Result<Shipper> {
        let max_handshakes = std::env::var(HANDSHAKES_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(MAX_HANDSHAKES);
        Shipper::start_limited(listener, shares, max_handshakes)
    }

    /// Serves `shares` on `listener`, `max_handshakes` unauthenticated ones at once.
    pub fn start_limited(
        listener: TcpListener,
        shares: Shares,
        max_handshakes: usize,
    ) -> Result<Shipper> {
        listener.set_nonblocking(true)?;
        let shares = Arc::new(shares);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let served = Arc::new(Served::new(max_handshakes));
        let thread = std::thread::spawn(move || accept(&listener, &shares, &served, &flag));
        Ok(Shipper {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Shipper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One unauthenticated handshake: ended early (its read side shut) when newer ones need its
/// slot.
struct Pending {
    stream: TcpStream,
    evicted: AtomicBool,
    done: AtomicBool,
}

/// The connections being served: the unauthenticated handshakes (oldest first) and each
/// authenticated rank's one connection, by a connection id.
struct Served {
    max_handshakes: usize,
    pending: Mutex<VecDeque<Arc<Pending>>>,
    ranks: Mutex<HashMap<usize, (u64, TcpStream)>>,
}

impl Served {
    fn new(max_handshakes: usize) -> Served {
        Served {
            max_handshakes: max_handshakes.max(1),
            pending: Mutex::new(VecDeque::new()),
            ranks: Mutex::new(HashMap::new()),
        }
    }

    /// Registers a new handshake, ending the oldest one when all slots are taken.
    fn admit(&self, stream: &TcpStream) -> std::io::Result<Arc<Pending>> {
        let pending = Arc::new(Pending {
            stream: stream.try_clone()?,
            evicted: AtomicBool::new(false),
            done: AtomicBool::new(false),
        });
        let mut queue = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        queue.retain(|p| !p.done.load(Ordering::SeqCst));
        if queue.len() >= self.max_handshakes {
            if let Some(oldest) = queue.pop_front() {
                oldest.evicted.store(true, Ordering::SeqCst);
                let _ = oldest.stream.shutdown(Shutdown::Read);
                if EVICTIONS.ready() {
                    tracing::warn!(
                        "shipping: {} unauthenticated handshakes at once; ended the oldest",
                        self.max_handshakes
                    );
                }
            }
        }
        queue.push_back(pending.clone());
        Ok(pending)
    }

    /// Gives an authenticated rank its slot; an older connection of the same rank (a worker
    /// that retried) is closed.
    fn hold(&self, rank: usize, id: u64, stream: &TcpStream) -> std::io::Result<()> {
        let clone = stream.try_clone()?;
        let mut ranks = self.ranks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, old)) = ranks.insert(rank, (id, clone)) {
            let _ = old.shutdown(Shutdown::Both);
        }
        Ok(())
    }

    /// Closes every connection: the load is over (done or given up), so a transfer still
    /// running ends now and its worker's load fails at once rather than finishing it.
    fn close_all(&self) {
        let ranks = self.ranks.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, stream) in ranks.values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        for p in pending.iter() {
            let _ = p.stream.shutdown(Shutdown::Both);
        }
    }

    fn release(&self, rank: usize, id: u64) {
        let mut ranks = self.ranks.lock().unwrap_or_else(PoisonError::into_inner);
        if ranks.get(&rank).is_some_and(|(held, _)| *held == id) {
            ranks.remove(&rank);
        }
    }
}

/// Refusals and accept errors are logged at most once a second, so a flood does not flood
/// the log too.
static REFUSALS: RateLimited = RateLimited::new();
static EVICTIONS: RateLimited = RateLimited::new();

/// Takes connections until told to stop; each is served on its own thread. Threads are
/// bounded: unauthenticated ones by `Served::max_handshakes` (each within
/// `HANDSHAKE_LIMIT`), authenticated ones to one per rank of the load.
fn accept(listener: &TcpListener, shares: &Arc<Shares>, served: &Arc<Served>, stop: &AtomicBool) {
    let mut next_id = 0u64;
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, from)) => {
                // Admitted here, in order, so the threads alive stay bounded.
                let Ok(pending) = served.admit(&stream) else {
                    continue;
                };
                next_id += 1;
                let (shares, served, id) = (shares.clone(), served.clone(), next_id);
                std::thread::spawn(move || {
                    if let Err(e) = connection(&stream, &pending, (&shares, &served), id) {
                        tracing::debug!(%from, "shipping connection ended: {e}");
                    }
                    // Closed now, not when `Served`'s copy of the socket goes.
                    let _ = stream.shutdown(Shutdown::Both);
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                if REFUSALS.ready() {
                    tracing::warn!("shipping: accept failed: {e}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    served.close_all();
}

fn refused(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)
}

/// One connection: the handshake within `HANDSHAKE_LIMIT`, then the rank's items. A
/// refusal is told to the peer before the connection closes.
fn connection(
    stream: &TcpStream,
    pending: &Pending,
    (shares, served): (&Shares, &Served),
    id: u64,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(HANDSHAKE_LIMIT))?;
    let shaken = handshake(stream, shares);
    pending.done.store(true, Ordering::SeqCst);
    let (rank, ask) = match shaken {
        Ok(done) => done,
        Err(e) => {
            let lasting = e.kind() == std::io::ErrorKind::PermissionDenied;
            let reason = if pending.evicted.load(Ordering::SeqCst) {
                format!(
                    "rank 0 was handling {} unauthenticated connections at once and ended this, the \
                     oldest",
                    served.max_handshakes
                )
            } else {
                e.to_string()
            };
            if REFUSALS.ready() {
                let peer = stream.peer_addr().ok();
                tracing::warn!(?peer, "shipping: refused a connection: {reason}");
            }
            let refusal = Leader::Refused {
                reason: reason.clone(),
                lasting,
            };
            let _ = write_frame(&mut &*stream, &refusal);
            return Err(refused(reason));
        }
    };
    served.hold(rank, id, stream)?;
    stream.set_write_timeout(Some(Duration::from_secs(60)))?;
    let sent = send_share(stream, shares, rank, ask);
    served.release(rank, id);
    if let Err(e) = &sent {
        tracing::warn!(rank, "shipping to a worker ended: {e}");
    }
    sent
}

/// The proofs both ways and the worker's ask, all within `HANDSHAKE_LIMIT`: its rank and
/// the items it asks for.
fn handshake(stream: &TcpStream, shares: &Shares) -> std::io::Result<(usize, Ask)> {
    let mut r = Deadline::new(stream, HANDSHAKE_LIMIT);
    let hello: Hello = read_frame(&mut (&mut r).take(HANDSHAKE_MAX_BYTES))?;
    let ours = nonce();
    let challenge = Leader::Challenge {
        proof: shares.secret.proof("ship-leader", &hello.nonce),
        nonce: ours.clone(),
    };
    write_frame(&mut &*stream, &challenge)?;
    let proof: Proof = read_frame(&mut (&mut r).take(HANDSHAKE_MAX_BYTES))?;
    if !shares.secret.verify("ship-worker", &ours, &proof.proof) {
        return Err(refused(format!(
            "a peer claiming rank {} failed authentication (another MLX_DISTRIBUTED_TOKEN?)",
            hello.rank
        )));
    }
    if !shares.by_rank.contains_key(&hello.rank) {
        return Err(refused(format!(
            "rank {} has no share in this load",
            hello.rank
        )));
    }
    write_frame(&mut &*stream, &Leader::Welcome)?;
    let ask: Ask = read_frame(&mut r)?;
    Ok((hello.rank, ask))
}

/// The items `rank` asked for, in order.
fn send_share(stream: &TcpStream, shares: &Shares, rank: usize, ask: Ask) -> std::io::Result<()> {
    let share = shares
        .by_rank
        .get(&rank)
        .ok_or_else(|| refused(format!("rank {rank} has no share in this load")))?;
    let mut out = BufWriter::with_capacity(CHUNK, stream);
    let mut files: HashMap<usize, File> = HashMap::new();
    let mut buf = vec![0u8; CHUNK];
    for index in ask.items {
        let item = share
            .items
            .get(index)
            .ok_or_else(|| refused(format!("rank {rank} asked for item {index}")))?;
        let file = match files.entry(item.file) {
            std::collections::hash_map::Entry::Occupied(f) => f.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let name = share.files.get(item.file).map(|f| f.name.as_str());
                v.insert(File::open(shares.dir.join(name.unwrap_or_default()))?)
            }
        };
        let corrupt = shares.corrupt.as_deref() == Some(item.name.as_str());
        send_item(&mut out, file, (index, item), corrupt, &mut buf)?;
    }
    out.flush()
}

/// An item on the wire: its index and length (little-endian u64 each), then its bytes.
/// `corrupt`: the test hook flips the item's first byte.
fn send_item(
    out: &mut impl Write,
    file: &mut File,
    (index, item): (usize, &ShipItem),
    corrupt: bool,
    buf: &mut [u8],
) -> std::io::Result<()> {
    out.write_all(&(index as u64).to_le_bytes())?;
    out.write_all(&item.len.to_le_bytes())?;
    let mut first = corrupt;
    for (offset, len) in item.pieces() {
        file.seek(SeekFrom::Start(offset))?;
        let mut left = len;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            file.read_exact(&mut buf[..n])?;
            if std::mem::take(&mut first) {
                buf[0] ^= 0xff;
            }
            out.write_all(&buf[..n])?;
            left -= n as u64;
        }
    }
    Ok(())
}
