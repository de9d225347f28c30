//! A worker's side: the share laid out in its cache under the model's fingerprint (files at
//! their original sizes, safetensors sparse), each item checked against its sha256 and
//! recorded once written, so a transfer resumes where it stopped.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{hex, Ask, Challenge, Hello, Proof, ATTEMPTS, CHUNK, EXIT_AFTER_ENV};
use crate::distributed::protocol::{ShipItem, Shipment};
use crate::distributed::wire::{nonce, read_frame, write_frame, Secret};
use crate::error::{Error, Result};

/// Who this worker is to rank 0's shipping server.
pub struct ReceiveOptions<'a> {
    pub rank: usize,
    pub secret: &'a Secret,
    /// Where shipped models are kept ([`super::cache_root`]).
    pub cache: PathBuf,
}

/// The cache's record of one transfer, `.shipping/last-transfer.json`.
#[derive(serde::Serialize)]
struct Transfer {
    /// Bytes read from the shipping connections (framing included).
    received_bytes: u64,
    /// Bytes of the share: every item's length.
    share_bytes: u64,
    items_received: usize,
    /// Time from the first connection to the files synced to disk.
    secs: f64,
    /// Of which syncing the files (`fsync`).
    sync_secs: f64,
}

/// Makes sure the cache holds `ship`'s share, receiving what it lacks; the folder to load.
pub fn receive(ship: &Shipment, opts: &ReceiveOptions) -> Result<PathBuf> {
    if ship.fingerprint.is_empty() || !ship.fingerprint.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(shipping(format!("bad fingerprint {:?}", ship.fingerprint)));
    }
    let dir = opts.cache.join(&ship.fingerprint);
    let mut cache = Cache::open(&dir, ship)?;
    let mut bad: HashMap<usize, u32> = HashMap::new();
    let mut link_failures = 0;
    let mut wire = Wire {
        started: std::time::Instant::now(),
        received: 0,
        exit_after: std::env::var(EXIT_AFTER_ENV)
            .ok()
            .and_then(|v| v.parse().ok()),
    };
    let mut got = 0;
    loop {
        let missing = cache.missing(ship);
        if missing.is_empty() {
            break;
        }
        let before = missing.len();
        match fetch(ship, &missing, &mut cache, opts, &mut wire) {
            Ok(failed) => {
                for i in failed {
                    let n = bad.entry(i).or_default();
                    *n += 1;
                    if *n >= ATTEMPTS {
                        return Err(corrupted(ship, i));
                    }
                }
            }
            Err(e) => {
                link_failures += 1;
                tracing::warn!(
                    attempt = link_failures,
                    "shipping from rank 0 broke off: {e}"
                );
                if link_failures >= ATTEMPTS {
                    return Err(shipping(format!("from {}: {e}", ship.address)));
                }
            }
        }
        got += before - cache.missing(ship).len();
    }
    cache.finish(ship, &wire, got)?;
    let found = crate::loader::fingerprint(&dir)?;
    if found != ship.fingerprint {
        return Err(shipping(format!(
            "{} holds model {found}, not rank 0's {}",
            dir.display(),
            ship.fingerprint
        )));
    }
    Ok(dir)
}

fn shipping(why: String) -> Error {
    Error::Distributed(format!("shipping the model: {why}"))
}

fn corrupted(ship: &Shipment, index: usize) -> Error {
    let name = ship.items.get(index).map_or("?", |i| i.name.as_str());
    shipping(format!(
        "`{name}` arrived with a sha256 that does not match rank 0's {ATTEMPTS} times in a row"
    ))
}

/// Byte count of the shipping connections, and the test hook that ends the process midway.
struct Wire {
    started: std::time::Instant,
    received: u64,
    exit_after: Option<u64>,
}

impl Wire {
    fn count(&mut self, n: usize) {
        self.received += n as u64;
        if self.exit_after.is_some_and(|limit| self.received >= limit) {
            tracing::error!(
                received = self.received,
                "test hook {EXIT_AFTER_ENV}: exiting midway through shipping"
            );
            // SAFETY: `_exit` ends the process at once, as a killed worker would.
            unsafe { libc::_exit(86) };
        }
    }
}

/// A reader that counts into `Wire`.
struct Counted<'a, R> {
    inner: R,
    wire: &'a mut Wire,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.wire.count(n);
        Ok(n)
    }
}

/// One connection: the handshake, the ask, and each item as it comes; the items whose bytes
/// failed their sha256.
fn fetch(
    ship: &Shipment,
    wanted: &[usize],
    cache: &mut Cache,
    opts: &ReceiveOptions,
    wire: &mut Wire,
) -> std::io::Result<Vec<usize>> {
    let addr = ship
        .address
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| bad_data(format!("{} resolves to nothing", ship.address)))?;
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let ours = nonce();
    write_frame(
        &mut &stream,
        &Hello {
            rank: opts.rank,
            nonce: ours.clone(),
        },
    )?;
    let mut r = Counted {
        inner: BufReader::with_capacity(CHUNK, &stream),
        wire,
    };
    let challenge: Challenge = read_frame(&mut r)?;
    if !opts.secret.verify("ship-leader", &ours, &challenge.proof) {
        return Err(bad_data(format!(
            "the peer at {} failed authentication (MLX_DISTRIBUTED_TOKEN differs?)",
            ship.address
        )));
    }
    let proof = opts.secret.proof("ship-worker", &challenge.nonce);
    write_frame(&mut &stream, &Proof { proof })?;
    let items = wanted.to_vec();
    write_frame(&mut &stream, &Ask { items })?;
    let mut failed = Vec::new();
    for _ in wanted {
        let index = read_u64(&mut r)? as usize;
        let len = read_u64(&mut r)?;
        let item = ship
            .items
            .get(index)
            .filter(|i| i.len == len && wanted.contains(&index))
            .ok_or_else(|| bad_data(format!("rank 0 sent item {index} of {len} bytes unasked")))?;
        if !cache.write(ship, index, item, &mut r)? {
            failed.push(index);
        }
    }
    Ok(failed)
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn bad_data(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// The share's folder in the cache: its files, and the items already written.
struct Cache {
    dir: PathBuf,
    files: Vec<File>,
    done: HashSet<String>,
    progress: File,
    /// One chunk, reused for every item.
    buf: Vec<u8>,
}

impl Cache {
    /// Opens (or lays out) `ship`'s files at their sizes and reads the progress record.
    fn open(dir: &Path, ship: &Shipment) -> Result<Cache> {
        let state = dir.join(".shipping");
        std::fs::create_dir_all(&state).map_err(Error::io(&state))?;
        let mut files = Vec::new();
        // Files made or resized now: whatever the record says of them is gone.
        let mut remade = HashSet::new();
        for f in &ship.files {
            let safe = Path::new(&f.name)
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
            if !safe || f.name.is_empty() {
                return Err(shipping(format!("rank 0 named a file {:?}", f.name)));
            }
            let path = dir.join(&f.name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(Error::io(parent))?;
            }
            let open = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path);
            let file = open.map_err(Error::io(&path))?;
            if file.metadata().map_err(Error::io(&path))?.len() != f.size {
                file.set_len(f.size).map_err(Error::io(&path))?;
                remade.insert(f.name.as_str());
            }
            files.push(file);
        }
        let record = state.join("received");
        let done = match std::fs::read_to_string(&record) {
            Ok(text) => (text.lines())
                .filter(|key| {
                    key.splitn(4, ' ')
                        .nth(3)
                        .is_some_and(|f| !remade.contains(f))
                })
                .map(str::to_owned)
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashSet::new(),
            Err(e) => return Err(Error::io(&record)(e)),
        };
        let progress = OpenOptions::new().create(true).append(true).open(&record);
        let progress = progress.map_err(Error::io(&record))?;
        Ok(Cache {
            dir: dir.to_owned(),
            files,
            done,
            progress,
            buf: vec![0u8; CHUNK],
        })
    }

    /// The record of an item: its hash, place and file.
    fn key(ship: &Shipment, item: &ShipItem) -> String {
        let file = ship.files.get(item.file).map_or("?", |f| f.name.as_str());
        let at = match item.strided {
            Some(s) => format!("{}/{}x{}", item.offset, s.stride, s.run),
            None => item.offset.to_string(),
        };
        format!("{} {at} {} {file}", item.sha256, item.len)
    }

    fn missing(&self, ship: &Shipment) -> Vec<usize> {
        (0..ship.items.len())
            .filter(|i| !self.done.contains(&Cache::key(ship, &ship.items[*i])))
            .collect()
    }

    /// Writes an item from the stream in place; recorded (and true) only if its sha256
    /// matches.
    fn write(
        &mut self,
        ship: &Shipment,
        index: usize,
        item: &ShipItem,
        r: &mut impl Read,
    ) -> std::io::Result<bool> {
        let file = self
            .files
            .get(item.file)
            .ok_or_else(|| bad_data(format!("item {index} names file {}", item.file)))?;
        let mut hasher = Sha256::new();
        let buf = &mut self.buf;
        for (offset, len) in item.pieces() {
            let mut at = 0u64;
            while at < len {
                let n = ((len - at) as usize).min(CHUNK);
                r.read_exact(&mut buf[..n])?;
                file.write_all_at(&buf[..n], offset + at)?;
                hasher.update(&buf[..n]);
                at += n as u64;
            }
        }
        if hex(&hasher.finalize()) != item.sha256 {
            tracing::warn!(item = %item.name, "shipped bytes fail their sha256");
            return Ok(false);
        }
        let key = Cache::key(ship, item);
        writeln!(self.progress, "{key}")?;
        self.done.insert(key);
        Ok(true)
    }

    /// Syncs the files and records the transfer.
    fn finish(&self, ship: &Shipment, wire: &Wire, got: usize) -> Result<()> {
        let sync = std::time::Instant::now();
        for f in &self.files {
            f.sync_all().map_err(Error::io(&self.dir))?;
        }
        let transfer = Transfer {
            received_bytes: wire.received,
            share_bytes: ship.items.iter().map(|i| i.len).sum(),
            items_received: got,
            secs: wire.started.elapsed().as_secs_f64(),
            sync_secs: sync.elapsed().as_secs_f64(),
        };
        tracing::info!(
            dir = %self.dir.display(),
            received_bytes = transfer.received_bytes,
            share_bytes = transfer.share_bytes,
            items = got,
            secs = transfer.secs,
            "shipped share ready"
        );
        let path = self.dir.join(".shipping/last-transfer.json");
        let json = serde_json::to_vec_pretty(&transfer).map_err(|e| shipping(e.to_string()))?;
        std::fs::write(&path, json).map_err(Error::io(&path))
    }
}
