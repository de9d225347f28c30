//! A worker's side: the share laid out in its cache under the model's fingerprint (files at
//! their original sizes, safetensors sparse), each item checked against its sha256 and
//! recorded once written, so a transfer resumes where it stopped.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{hex, Ask, Hello, Leader, Proof, ATTEMPTS, CHUNK, EXIT_AFTER_ENV, LINK_ATTEMPTS};
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
                broke_off(ship, link_failures, &e)?;
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

/// A connection that failed (the `tries`th): the load's error once trying again cannot help
/// or the tries are spent, else a wait that doubles each time.
fn broke_off(ship: &Shipment, tries: u32, e: &std::io::Error) -> Result<()> {
    tracing::warn!(attempt = tries, "shipping from rank 0 broke off: {e}");
    let lasting = e.kind() == std::io::ErrorKind::PermissionDenied;
    if tries >= LINK_ATTEMPTS || lasting {
        return Err(shipping(format!(
            "from {} ({tries} tries): {e}",
            ship.address
        )));
    }
    std::thread::sleep(Duration::from_millis(100 << (tries - 1)));
    Ok(())
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
    let mut r = Counted {
        inner: BufReader::with_capacity(CHUNK, &stream),
        wire,
    };
    handshake(&stream, &mut r, ship, opts)?;
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

/// The proofs both ways, then rank 0's welcome.
fn handshake(
    stream: &TcpStream,
    r: &mut impl Read,
    ship: &Shipment,
    opts: &ReceiveOptions,
) -> std::io::Result<()> {
    let ours = nonce();
    let hello = Hello {
        rank: opts.rank,
        nonce: ours.clone(),
    };
    write_frame(&mut &*stream, &hello)?;
    let (theirs, challenge) = match leader_says(r)? {
        Leader::Challenge { proof, nonce } => (proof, nonce),
        other => {
            return Err(bad_data(format!(
                "rank 0 sent {other:?} before its challenge"
            )))
        }
    };
    if !opts.secret.verify("ship-leader", &ours, &theirs) {
        return Err(denied(format!(
            "the peer at {} failed authentication (MLX_DISTRIBUTED_TOKEN differs?)",
            ship.address
        )));
    }
    let proof = opts.secret.proof("ship-worker", &challenge);
    write_frame(&mut &*stream, &Proof { proof })?;
    match leader_says(r)? {
        Leader::Welcome => Ok(()),
        other => Err(bad_data(format!(
            "rank 0 sent {other:?} instead of its welcome"
        ))),
    }
}

/// Rank 0's next handshake frame; its refusal as an error that says why, and a connection
/// it closed without one as an error that says where to look.
pub(super) fn leader_says(r: &mut impl Read) -> std::io::Result<Leader> {
    match read_frame(r) {
        Ok(Leader::Refused { reason, lasting }) => Err(std::io::Error::new(
            if lasting {
                std::io::ErrorKind::PermissionDenied
            } else {
                std::io::ErrorKind::ConnectionRefused
            },
            format!("rank 0 refused the connection: {reason}"),
        )),
        Ok(said) => Ok(said),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("{e} (during the handshake; rank 0's log says why it ended it)"),
        )),
    }
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// A failure trying again cannot mend.
fn denied(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)
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
        private_dirs(dir, Path::new(".shipping"))?;
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
            if let Some(parent) = Path::new(&f.name).parent() {
                private_dirs(dir, parent)?;
            }
            let file = open_private(&path, OpenOptions::new().read(true).write(true))?;
            if file.metadata().map_err(Error::io(&path))?.len() != f.size {
                file.set_len(f.size).map_err(Error::io(&path))?;
                remade.insert(f.name.as_str());
            }
            files.push(file);
        }
        let record = state.join("received");
        let done = match read_private(&record) {
            Ok(text) => (text.lines())
                .filter(|key| {
                    key.splitn(4, ' ')
                        .nth(3)
                        .is_some_and(|f| !remade.contains(f))
                })
                .map(str::to_owned)
                .collect(),
            Err(None) => HashSet::new(),
            Err(Some(e)) => return Err(e),
        };
        let progress = open_private(&record, OpenOptions::new().append(true))?;
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
        let mut file = open_private(&path, OpenOptions::new().write(true).truncate(true))?;
        file.write_all(&json).map_err(Error::io(&path))
    }
}

/// Creates (or walks) `dir`, then each folder of `rel` inside it, as private folders (0700),
/// refusing any that is a symbolic link or not a folder: the cache writes only inside its
/// own tree.
fn private_dirs(dir: &Path, rel: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(Error::io(dir))?;
    let mut at = dir.to_owned();
    check_dir(&at)?;
    for part in rel.components() {
        let Component::Normal(name) = part else {
            return Err(shipping(format!("{} leaves the cache", rel.display())));
        };
        at.push(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(&at)(e)),
        }
        check_dir(&at)?;
    }
    Ok(())
}

/// A folder of the cache: a real folder (not a link to one), made private.
fn check_dir(path: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(Error::io(path))?;
    if meta.file_type().is_symlink() {
        return Err(linked(path));
    }
    if !meta.is_dir() {
        return Err(shipping(format!("{} is not a folder", path.display())));
    }
    if meta.permissions().mode() & 0o777 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .map_err(Error::io(path))?;
    }
    Ok(())
}

fn linked(path: &Path) -> Error {
    shipping(format!(
        "{} is a symbolic link; the shipping cache does not follow links (remove it)",
        path.display()
    ))
}

/// Opens (creating if missing) a file of the cache without following a link (`O_NOFOLLOW`),
/// private (0600), refusing anything but a regular file.
fn open_private(path: &Path, opts: &mut OpenOptions) -> Result<File> {
    let file = opts
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => linked(path),
            _ => Error::io(path)(e),
        })?;
    let meta = file.metadata().map_err(Error::io(path))?;
    if !meta.is_file() {
        return Err(shipping(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(Error::io(path))?;
    }
    Ok(file)
}

/// A cache file's text; `Err(None)` when it does not exist.
fn read_private(path: &Path) -> std::result::Result<String, Option<Error>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    let mut file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(Some(linked(path))),
        Err(e) => return Err(Some(Error::io(path)(e))),
    };
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| Some(Error::io(path)(e)))?;
    Ok(text)
}
