//! Forming a cluster, both halves of the handshake. Rank 0 (`join`) takes connections, each
//! worker proves the shared secret and its build in a bounded handshake on its own thread, and
//! the first handshake per rank wins. A worker (`connect`) names itself, checks rank 0's proof
//! of the token and gives its own.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::protocol::{Identity, ToLeader, ToWorker};
use super::wire::{digest, nonce, read_frame, write_frame, Secret};
use super::Hostfile;
use crate::error::{Error, Result};

/// How rank 0 forms and watches its cluster.
#[derive(Clone)]
pub struct ClusterOptions {
    /// Number of ranks, rank 0 included.
    pub size: usize,
    /// Where rank 0 listens for workers (`ip:port`).
    pub control: String,
    /// Each rank's address as the hostfile names it, for error messages.
    pub rank_addresses: Vec<String>,
    pub hostfile_digest: String,
    pub secret: Secret,
    pub join_timeout: Duration,
    /// Pings go out this often; a worker silent for three of them is lost.
    pub heartbeat: Duration,
}

impl ClusterOptions {
    /// Rank 0's options for `hostfile`'s cluster, listening on `control`: the secret from
    /// `token` (or the hostfile), a ping a second.
    pub fn new(
        hostfile: &Hostfile,
        control: String,
        join_timeout: Duration,
        token: Option<&str>,
    ) -> ClusterOptions {
        let json = hostfile.mlx_json();
        ClusterOptions {
            size: hostfile.size(),
            control,
            rank_addresses: hostfile.rank_addresses(),
            hostfile_digest: digest(json.as_bytes()),
            secret: Secret::new(token, &json),
            join_timeout,
            heartbeat: Duration::from_secs(1),
        }
    }
}

/// How a worker joins rank 0's cluster.
#[derive(Clone)]
pub struct LinkOptions {
    pub rank: usize,
    /// Rank 0's control address.
    pub control: String,
    pub hostfile_digest: String,
    pub secret: Secret,
}

impl LinkOptions {
    /// Worker `rank`'s options for `hostfile`'s cluster, whose rank 0 listens on `control`:
    /// the secret from `token` (or the hostfile), as rank 0's `ClusterOptions::new` makes it.
    pub fn new(hostfile: &Hostfile, rank: usize, control: String, token: Option<&str>) -> Self {
        let json = hostfile.mlx_json();
        LinkOptions {
            rank,
            control,
            hostfile_digest: digest(json.as_bytes()),
            secret: Secret::new(token, &json),
        }
    }
}

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Rank 0 is not there (yet): try again.
    #[error("{0}")]
    Retry(String),
    /// Rank 0 refused this worker: waiting will not help.
    #[error("rank 0 refused this worker: {0}")]
    Rejected(String),
    /// This process was asked to stop while it waited.
    #[error("stopped while waiting for rank 0")]
    Stopped,
}

/// The workers that joined, by rank: each one's connection and free memory.
pub(super) type Members = BTreeMap<usize, (TcpStream, u64)>;

/// The longest `join_timeout`: a load waits for its workers at most an hour, so a typo cannot
/// hold a LoadModel (and its cluster's port) for days.
pub const MAX_JOIN_TIMEOUT_SECS: u64 = 3600;

/// Why a wait for peers ends early (the caller left, Free, a stop): checked at every tick.
pub type GiveUp<'a> = &'a dyn Fn() -> Option<Error>;

/// `join_timeout` within `MAX_JOIN_TIMEOUT_SECS`, or an error naming both.
pub fn check_join_timeout(join_timeout: Duration) -> Result<()> {
    match join_timeout.as_secs() > MAX_JOIN_TIMEOUT_SECS {
        true => Err(Error::InvalidRequest(format!(
            "join_timeout is {} s, above its limit of {MAX_JOIN_TIMEOUT_SECS} s",
            join_timeout.as_secs()
        ))),
        false => Ok(()),
    }
}

/// Waits for every worker to join and pass its handshake (each on its own thread, so an idle
/// or slow peer delays nobody; `join_timeout` is a hard deadline): the members by rank, each
/// with its connection and free memory. `give_up` (and a stop) ends the wait at its next tick.
pub(super) fn join(opts: &ClusterOptions, give_up: GiveUp<'_>) -> Result<Members> {
    check_join_timeout(opts.join_timeout)?;
    let listener = TcpListener::bind(&opts.control).map_err(|e| {
        Error::Distributed(format!(
            "rank 0 cannot listen for workers on {}: {e}",
            opts.control
        ))
    })?;
    listener.set_nonblocking(true)?;
    tracing::info!(control = %opts.control, ranks = opts.size, "waiting for the workers to join");
    let deadline = Instant::now() + opts.join_timeout;
    let mut joining = Joining::new(opts);
    while joining.members.len() + 1 < opts.size {
        joining.accept(&listener)?;
        if crate::lifecycle::stop_requested() {
            return Err(Error::ShuttingDown);
        }
        if let Some(e) = give_up() {
            return Err(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Distributed(missing_ranks(opts, &joining.members)));
        }
        match joining.results.recv_timeout(left.min(ACCEPT_TICK)) {
            Ok((from, Ok(candidate))) => joining.admit(from, candidate),
            Ok((_, Err(Refusal::Fatal(msg)))) => return Err(Error::Distributed(msg)),
            Ok((from, Err(Refusal::Ignore(msg)))) => tracing::warn!(%from, "{msg}"),
            Err(_) => {}
        }
    }
    Ok(joining.members)
}

/// A whole handshake must end within this: a silent or slow peer holds only its own thread,
/// and not for long.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

/// At most this many handshakes run at once; connections past it are closed at once.
pub(super) const MAX_HANDSHAKES: usize = 64;

/// A handshake reads at most this many bytes (`Join` and `Proof` are small), so a stranger
/// cannot make rank 0 take in a large frame before it has proved anything.
const HANDSHAKE_MAX_BYTES: u64 = 64 << 10;

/// How often the join loop looks for new connections, a stop and the deadline.
const ACCEPT_TICK: Duration = Duration::from_millis(20);

enum Refusal {
    /// The deployment is wrong (another build, another hostfile): LoadModel must fail.
    Fatal(String),
    /// A stranger or a broken connection: ignore it and keep waiting.
    Ignore(String),
}

/// A worker that passed the handshake, not yet told `Accepted`.
struct Candidate {
    rank: usize,
    stream: TcpStream,
    free_memory: u64,
}

/// What a handshake thread reports, and from where.
type Outcome = (SocketAddr, std::result::Result<Candidate, Refusal>);

/// One cluster formation: the handshakes in flight and the workers admitted so far.
struct Joining {
    opts: Arc<ClusterOptions>,
    /// The ranks admitted so far, for the handshakes' early duplicate check.
    joined: Arc<Vec<AtomicBool>>,
    /// Handshakes in flight.
    active: Arc<AtomicUsize>,
    tx: mpsc::Sender<Outcome>,
    results: mpsc::Receiver<Outcome>,
    members: BTreeMap<usize, (TcpStream, u64)>,
}

/// Counts one handshake in flight until dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Joining {
    fn new(opts: &ClusterOptions) -> Joining {
        let (tx, results) = mpsc::channel();
        Joining {
            opts: Arc::new(opts.clone()),
            joined: Arc::new((0..opts.size).map(|_| AtomicBool::new(false)).collect()),
            active: Arc::new(AtomicUsize::new(0)),
            tx,
            results,
            members: BTreeMap::new(),
        }
    }

    /// Takes the connections waiting on the listener (a bounded number per call, so a flood
    /// cannot keep the loop from its deadline) and starts a handshake thread for each.
    ///
    /// The threads are detached: when `form` returns, each still running ends by its own
    /// `HANDSHAKE_DEADLINE` and its result, sent to a closed channel, is dropped with the
    /// connection (a worker then sees EOF and tries again).
    fn accept(&mut self, listener: &TcpListener) -> Result<()> {
        for _ in 0..MAX_HANDSHAKES {
            let (stream, from) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(e.into()),
            };
            if self.active.fetch_add(1, Ordering::SeqCst) >= MAX_HANDSHAKES {
                self.active.fetch_sub(1, Ordering::SeqCst);
                tracing::warn!(%from, "{MAX_HANDSHAKES} handshakes already running; closing this connection");
                continue;
            }
            let slot = Slot(self.active.clone());
            let (opts, joined, tx) = (self.opts.clone(), self.joined.clone(), self.tx.clone());
            let spawned = std::thread::Builder::new()
                .name("control-handshake".into())
                .spawn(move || {
                    let _slot = slot;
                    let _ = tx.send((from, handshake(stream, &opts, &joined)));
                });
            if let Err(e) = spawned {
                tracing::warn!(%from, "cannot start a handshake thread ({e}); closing this connection");
            }
        }
        Ok(())
    }

    /// Admits a worker whose handshake passed, unless its rank joined meanwhile (the first
    /// handshake to finish wins; the later one is told `Rejected`).
    fn admit(&mut self, from: SocketAddr, candidate: Candidate) {
        let Candidate {
            rank,
            mut stream,
            free_memory,
        } = candidate;
        if self.members.contains_key(&rank) {
            let reason = format!("rank {rank} joined twice");
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = write_frame(
                &mut stream,
                &ToWorker::Rejected {
                    reason: reason.clone(),
                },
            );
            tracing::warn!(%from, "{reason}");
            return;
        }
        let accepted = stream
            .set_write_timeout(Some(Duration::from_secs(1)))
            .and_then(|()| write_frame(&mut stream, &ToWorker::Accepted))
            .and_then(|()| stream.set_write_timeout(None))
            .and_then(|()| stream.set_read_timeout(None));
        if let Err(e) = accepted {
            tracing::warn!(%from, "a worker's handshake failed: {e}");
            return;
        }
        tracing::info!(rank, %from, "worker joined");
        if let Some(flag) = self.joined.get(rank) {
            flag.store(true, Ordering::SeqCst);
        }
        self.members.insert(rank, (stream, free_memory));
    }
}

/// A handshake's view of its connection: reads and writes fail once `until` has passed, and
/// reads stop after `budget` bytes, so a peer cannot stretch a handshake by trickling bytes.
struct Bounded<'a> {
    stream: &'a TcpStream,
    until: Instant,
    budget: u64,
}

impl Bounded<'_> {
    /// Time left; an error once the deadline has passed.
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        match left.is_zero() {
            true => Err(late_handshake()),
            false => Ok(left),
        }
    }
}

/// A socket timeout during a handshake means the deadline passed: say so.
fn late_handshake() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no handshake within {} s", HANDSHAKE_DEADLINE.as_secs()),
    )
}

fn timeout_is_late(e: std::io::Error) -> std::io::Error {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => late_handshake(),
        _ => e,
    }
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        if self.budget == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a handshake over {HANDSHAKE_MAX_BYTES} bytes"),
            ));
        }
        let room = buf
            .len()
            .min(usize::try_from(self.budget).unwrap_or(usize::MAX));
        let mut stream: &TcpStream = self.stream;
        let n = stream.read(&mut buf[..room]).map_err(timeout_is_late)?;
        self.budget = self.budget.saturating_sub(n as u64);
        Ok(n)
    }
}

impl Write for Bounded<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        let mut stream: &TcpStream = self.stream;
        stream.write(buf).map_err(timeout_is_late)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Authenticates one connecting worker, all within `HANDSHAKE_DEADLINE`; `Accepted` is left
/// to the join loop, which alone knows whether the rank has joined meanwhile.
fn handshake(
    stream: TcpStream,
    opts: &ClusterOptions,
    joined: &[AtomicBool],
) -> std::result::Result<Candidate, Refusal> {
    let io = |e: std::io::Error| Refusal::Ignore(format!("a worker's handshake failed: {e}"));
    stream.set_nonblocking(false).map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    let mut s = Bounded {
        stream: &stream,
        until: Instant::now() + HANDSHAKE_DEADLINE,
        budget: HANDSHAKE_MAX_BYTES,
    };
    let ToLeader::Join {
        rank,
        identity,
        hostfile,
        nonce: their_nonce,
        free_memory,
    } = read_frame(&mut s).map_err(io)?
    else {
        return Err(Refusal::Ignore(
            "a peer opened with something other than Join".into(),
        ));
    };
    check_join(&mut s, opts, joined, rank, &identity, &hostfile)?;
    let ours = nonce();
    write_frame(
        &mut s,
        &ToWorker::Challenge {
            proof: opts.secret.proof("leader", &their_nonce),
            nonce: ours.clone(),
        },
    )
    .map_err(io)?;
    let ToLeader::Proof { proof } = read_frame(&mut s).map_err(io)? else {
        return Err(Refusal::Ignore(format!(
            "rank {rank} did not answer the challenge"
        )));
    };
    if !opts.secret.verify("worker", &ours, &proof) {
        return Err(reject(&mut s, format!("a peer claiming rank {rank} failed authentication (MLX_DISTRIBUTED_TOKEN differs?)"), false));
    }
    Ok(Candidate {
        rank,
        stream,
        free_memory,
    })
}

/// Checks a `Join` before the challenge: the rank, the build, the hostfile, and whether the
/// rank has joined already.
fn check_join(
    s: &mut Bounded<'_>,
    opts: &ClusterOptions,
    joined: &[AtomicBool],
    rank: usize,
    identity: &Identity,
    hostfile: &str,
) -> std::result::Result<(), Refusal> {
    let address = opts.rank_addresses.get(rank).cloned().unwrap_or_default();
    if rank == 0 || rank >= opts.size {
        let reason = format!(
            "a worker claims rank {rank}, but the hostfile has ranks 0..{}",
            opts.size
        );
        return Err(reject(s, reason, false));
    }
    if let Some(why) = Identity::current().mismatch(identity) {
        return Err(reject(
            s,
            format!("rank {rank} ({address}) cannot join: {why}"),
            true,
        ));
    }
    if hostfile != opts.hostfile_digest {
        return Err(reject(
            s,
            format!("rank {rank} ({address}) cannot join: its hostfile differs from rank 0's"),
            true,
        ));
    }
    if joined.get(rank).is_some_and(|j| j.load(Ordering::SeqCst)) {
        return Err(reject(s, format!("rank {rank} joined twice"), false));
    }
    Ok(())
}

/// Tells the peer why it is refused (best effort) and classifies the refusal.
fn reject(s: &mut Bounded<'_>, reason: String, fatal: bool) -> Refusal {
    let _ = write_frame(
        s,
        &ToWorker::Rejected {
            reason: reason.clone(),
        },
    );
    match fatal {
        true => Refusal::Fatal(reason),
        false => Refusal::Ignore(reason),
    }
}

fn missing_ranks(opts: &ClusterOptions, joined: &BTreeMap<usize, (TcpStream, u64)>) -> String {
    let missing: Vec<String> = (1..opts.size)
        .filter(|r| !joined.contains_key(r))
        .map(|r| {
            format!(
                "rank {r} ({})",
                opts.rank_addresses
                    .get(r)
                    .map(String::as_str)
                    .unwrap_or("?")
            )
        })
        .collect();
    format!(
        "{} did not join within {} s: start `worker mlx-distributed --rank N --hostfile ...` on each \
         machine before loading (workers connect to rank 0 at {})",
        missing.join(", "),
        opts.join_timeout.as_secs(),
        opts.control
    )
}

/// A worker's half of the handshake, one attempt: it names its rank, build and hostfile,
/// checks rank 0's proof of the token and gives its own; the stream once rank 0 accepts.
pub(super) fn connect(opts: &LinkOptions) -> std::result::Result<TcpStream, LinkError> {
    let retry = |e: std::io::Error| LinkError::Retry(e.to_string());
    let mut s = TcpStream::connect(&opts.control).map_err(retry)?;
    s.set_nodelay(true).map_err(retry)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(retry)?;
    let ours = nonce();
    write_frame(
        &mut s,
        &ToLeader::Join {
            rank: opts.rank,
            identity: Identity::current(),
            hostfile: opts.hostfile_digest.clone(),
            nonce: ours.clone(),
            free_memory: super::free_memory(),
        },
    )
    .map_err(retry)?;
    match read_frame(&mut s).map_err(retry)? {
        ToWorker::Challenge {
            proof,
            nonce: theirs,
        } => {
            if !opts.secret.verify("leader", &ours, &proof) {
                return Err(LinkError::Retry(format!(
                    "the peer at {} failed authentication (MLX_DISTRIBUTED_TOKEN differs?)",
                    opts.control
                )));
            }
            let proof = opts.secret.proof("worker", &theirs);
            write_frame(&mut s, &ToLeader::Proof { proof }).map_err(retry)?;
        }
        ToWorker::Rejected { reason } => return Err(LinkError::Rejected(reason)),
        other => return Err(LinkError::Retry(format!("unexpected {other:?}"))),
    }
    match read_frame(&mut s).map_err(retry)? {
        ToWorker::Accepted => {}
        ToWorker::Rejected { reason } => return Err(LinkError::Rejected(reason)),
        other => return Err(LinkError::Retry(format!("unexpected {other:?}"))),
    }
    s.set_read_timeout(None).map_err(retry)?;
    Ok(s)
}
