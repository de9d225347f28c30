//! Rank 0's shipping server for one LoadModel: a listener beside the control channel, one
//! thread per worker connection, each authenticated by the control channel's secret before
//! it sends a byte of the model.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Ask, Challenge, Hello, Proof, CHUNK, CORRUPT_ENV, HANDSHAKE_MAX_BYTES};
use crate::distributed::protocol::{ShipItem, Shipment};
use crate::distributed::wire::{nonce, read_frame, write_frame, Secret};
use crate::error::{Error, Result};

/// A listener on the control channel's host (workers reach rank 0 there) at a free port, and
/// the address workers are told.
pub fn listen(control: &str) -> Result<(TcpListener, String)> {
    let host = control.rsplit_once(':').map_or(control, |(h, _)| h);
    let listener = TcpListener::bind((host.trim_matches(['[', ']']), 0))
        .map_err(|e| Error::Distributed(format!("shipping: cannot listen on {host}: {e}")))?;
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
    /// Serves `shares` on `listener`.
    pub fn start(listener: TcpListener, shares: Shares) -> Result<Shipper> {
        listener.set_nonblocking(true)?;
        let shares = Arc::new(shares);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || accept(&listener, &shares, &flag));
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

/// Connections served at once; more are closed at once (a worker retries), so strangers
/// cannot make rank 0 spawn threads without bound.
const MAX_CONNECTIONS: usize = 64;

/// Takes connections until told to stop; each is served on its own thread, bounded by its
/// socket timeouts.
fn accept(listener: &TcpListener, shares: &Arc<Shares>, stop: &AtomicBool) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((_, from)) if active.load(Ordering::SeqCst) >= MAX_CONNECTIONS => {
                tracing::warn!(%from, "shipping: {MAX_CONNECTIONS} connections already; closed");
            }
            Ok((stream, from)) => {
                let (shares, active) = (shares.clone(), active.clone());
                active.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    if let Err(e) = serve(stream, &shares) {
                        tracing::warn!(%from, "shipping to a worker ended: {e}");
                    }
                    active.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::warn!("shipping: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn refused(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)
}

/// One worker's connection: the handshake, then the items it asks for, in order.
fn serve(stream: TcpStream, shares: &Shares) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(60)))?;
    let hello: Hello = read_frame(&mut (&stream).take(HANDSHAKE_MAX_BYTES))?;
    let ours = nonce();
    let challenge = Challenge {
        proof: shares.secret.proof("ship-leader", &hello.nonce),
        nonce: ours.clone(),
    };
    write_frame(&mut &stream, &challenge)?;
    let proof: Proof = read_frame(&mut (&stream).take(HANDSHAKE_MAX_BYTES))?;
    if !shares.secret.verify("ship-worker", &ours, &proof.proof) {
        return Err(refused(format!(
            "a peer claiming rank {} failed authentication",
            hello.rank
        )));
    }
    let share = shares
        .by_rank
        .get(&hello.rank)
        .ok_or_else(|| refused(format!("rank {} has no share in this load", hello.rank)))?;
    let ask: Ask = read_frame(&mut &stream)?;
    let mut out = BufWriter::with_capacity(CHUNK, &stream);
    let mut files: HashMap<usize, File> = HashMap::new();
    let mut buf = vec![0u8; CHUNK];
    for index in ask.items {
        let item = share
            .items
            .get(index)
            .ok_or_else(|| refused(format!("rank {} asked for item {index}", hello.rank)))?;
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
