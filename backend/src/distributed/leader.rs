//! Rank 0's side of the control channel: the workers join over TCP, then rank 0 sends them
//! plans and watches them. A worker that disconnects or stops answering pings is a fault
//! that fails the request in flight within seconds, whatever MLX is blocked on.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::inbox::Inbox;
use super::protocol::{Identity, ToLeader, ToWorker};
use super::wire::{nonce, read_frame, write_frame, Secret};
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

/// After a fault, how long the engine may stay blocked in MLX before rank 0 exits so that
/// the host restarts it (a collective with a vanished peer may never return).
const WEDGED_EXIT_AFTER: Duration = Duration::from_secs(20);

/// At most this many early replies are kept; stale ones fall off.
const MAX_KEPT: usize = 64;

type Listener = Box<dyn FnOnce(String) + Send>;
type Observer = Box<dyn Fn(&str) + Send>;

/// The first fault seen, and who to tell.
#[derive(Default)]
pub struct Fault {
    message: Mutex<Option<String>>,
    listener: Mutex<Option<Listener>>,
    observer: Mutex<Option<Observer>>,
    /// A request is running on the engine thread.
    busy: Arc<AtomicBool>,
    /// The last rank's outputs that came in control messages; closed on the first fault, so
    /// a receive blocked on a lost rank returns.
    inbox: Arc<Inbox>,
}

impl Fault {
    fn raise(&self, message: String) {
        let mut slot = self.message.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return;
        }
        tracing::error!("{message}");
        *slot = Some(message.clone());
        drop(slot);
        self.inbox.close(&message);
        if let Some(observe) = self
            .observer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            observe(&message);
        }
        if self.busy.load(Ordering::SeqCst) {
            let busy = self.busy.clone();
            std::thread::spawn(move || {
                std::thread::sleep(WEDGED_EXIT_AFTER);
                if busy.load(Ordering::SeqCst) {
                    tracing::error!(
                        "the engine is still blocked in MLX {} s after a rank was lost; exiting so \
                         that the host restarts this backend",
                        WEDGED_EXIT_AFTER.as_secs()
                    );
                    // Not `exit`: its destructors would race the MLX work that is stuck.
                    crate::lifecycle::exit_now(crate::lifecycle::EXIT_STUCK);
                }
            });
        }
        if let Some(tell) = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            tell(message);
        }
    }

    pub fn get(&self) -> Option<String> {
        self.message
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Calls `tell` once, on the next fault (or now, if there is one already).
    pub fn on_fault(&self, tell: Listener) {
        match self.get() {
            Some(message) => tell(message),
            None => *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(tell),
        }
    }

    /// Calls `observe` on every fault (to publish the degraded state).
    pub fn observe(&self, observe: Observer) {
        *self.observer.lock().unwrap_or_else(|e| e.into_inner()) = Some(observe);
    }

    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::SeqCst);
    }

    pub fn clear_listener(&self) {
        self.listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

struct Peer {
    rank: usize,
    address: String,
    writer: Mutex<TcpStream>,
    free_memory: u64,
}

/// Rank 0's connections to every worker.
pub struct Cluster {
    peers: Arc<Vec<Peer>>,
    replies: mpsc::Receiver<(usize, ToLeader)>,
    /// Replies that came while rank 0 waited for something else.
    kept: RefCell<VecDeque<(usize, ToLeader)>>,
    fault: Arc<Fault>,
    stop: Arc<AtomicBool>,
    /// Dropped to wake the heartbeat at once.
    stop_heartbeat: Option<mpsc::Sender<()>>,
    /// The readers and the heartbeat, joined when the cluster is dropped.
    threads: Vec<JoinHandle<()>>,
}

impl Cluster {
    /// Waits for every worker to join, authenticates them and checks their builds. Each
    /// connection is handshaken on its own thread, so an idle or slow peer delays nobody, and
    /// `join_timeout` is a hard deadline.
    pub fn form(opts: &ClusterOptions) -> Result<Cluster> {
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
        let peers: Vec<Peer> = joining
            .members
            .into_iter()
            .map(|(rank, (stream, free_memory))| {
                Ok(Peer {
                    rank,
                    address: opts.rank_addresses.get(rank).cloned().unwrap_or_default(),
                    writer: Mutex::new(stream.try_clone()?),
                    free_memory,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Cluster::watch(peers, opts.heartbeat))
    }

    /// Starts a reader per worker and the heartbeat.
    fn watch(peers: Vec<Peer>, heartbeat: Duration) -> Cluster {
        let peers = Arc::new(peers);
        let fault = Arc::new(Fault::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, replies) = mpsc::channel();
        let last_seen: Arc<Vec<Mutex<Instant>>> =
            Arc::new(peers.iter().map(|_| Mutex::new(Instant::now())).collect());
        let mut threads = Vec::new();
        for (i, peer) in peers.iter().enumerate() {
            let reader = peer
                .writer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .try_clone();
            let (fault, stop, tx, seen) =
                (fault.clone(), stop.clone(), tx.clone(), last_seen.clone());
            let (rank, address) = (peer.rank, peer.address.clone());
            threads.push(std::thread::spawn(move || {
                let Ok(mut reader) = reader else { return };
                loop {
                    match read_frame::<ToLeader>(&mut reader) {
                        Ok(ToLeader::StepFailed { error }) => {
                            fault.raise(format!("rank {rank} ({address}) failed a step: {error}"));
                        }
                        Ok(ToLeader::Output { seq, activations }) => {
                            *seen[i].lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                            fault.inbox.deliver(seq, activations.0);
                        }
                        Ok(msg) => {
                            *seen[i].lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                            if !matches!(msg, ToLeader::Pong) {
                                let _ = tx.send((rank, msg));
                            }
                        }
                        Err(e) => {
                            if !stop.load(Ordering::SeqCst) {
                                fault.raise(format!("rank {rank} ({address}) was lost: {e}"));
                            }
                            return;
                        }
                    }
                }
            }));
        }
        let (p, f, s) = (peers.clone(), fault.clone(), stop.clone());
        let (stop_heartbeat, woken) = mpsc::channel::<()>();
        threads.push(std::thread::spawn(move || {
            // A beat every `heartbeat`, until the cluster is dropped (the channel closes).
            while let Err(mpsc::RecvTimeoutError::Timeout) = woken.recv_timeout(heartbeat) {
                for (i, peer) in p.iter().enumerate() {
                    let silent = last_seen[i]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .elapsed();
                    if silent > heartbeat * 3 && !s.load(Ordering::SeqCst) {
                        f.raise(format!(
                            "rank {} ({}) stopped answering: silent for {:.1} s",
                            peer.rank,
                            peer.address,
                            silent.as_secs_f64()
                        ));
                    }
                    let mut w = peer.writer.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = write_frame(&mut *w, &ToWorker::Ping);
                }
            }
        }));
        Cluster {
            peers,
            replies,
            kept: RefCell::new(VecDeque::new()),
            fault,
            stop,
            stop_heartbeat: Some(stop_heartbeat),
            threads,
        }
    }

    pub fn size(&self) -> usize {
        self.peers.len() + 1
    }

    /// Where the last rank's outputs arrive when they come in control messages.
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.fault.inbox
    }

    pub fn fault(&self) -> &Arc<Fault> {
        &self.fault
    }

    /// Free memory each rank reported (rank 0's own first).
    pub fn free_memory(&self) -> Vec<u64> {
        std::iter::once(super::free_memory())
            .chain(self.peers.iter().map(|p| p.free_memory))
            .collect()
    }

    /// Fails with the fault, if there is one.
    pub fn check(&self) -> Result<()> {
        match self.fault.get() {
            Some(message) => Err(Error::RankLost(message)),
            None => Ok(()),
        }
    }

    /// Sends `msg` to every worker.
    pub fn broadcast(&self, msg: &ToWorker) -> Result<()> {
        self.check()?;
        for peer in self.peers.iter() {
            let mut w = peer.writer.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = write_frame(&mut *w, msg) {
                self.fault.raise(format!(
                    "rank {} ({}) was lost: {e}",
                    peer.rank, peer.address
                ));
                return self.check();
            }
        }
        Ok(())
    }

    /// Marks the cluster failed: the ranks are out of step (a worker has a step rank 0 could
    /// not finish).
    pub fn fail(&self, message: String) {
        self.fault.raise(message);
    }

    /// Sends `msg` to one worker.
    pub fn send_to(&self, rank: usize, msg: &ToWorker) -> Result<()> {
        self.check()?;
        let peer = self
            .peers
            .iter()
            .find(|p| p.rank == rank)
            .ok_or_else(|| Error::Internal(format!("no worker has rank {rank}")))?;
        let mut w = peer.writer.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = write_frame(&mut *w, msg) {
            drop(w);
            self.fault
                .raise(format!("rank {rank} ({}) was lost: {e}", peer.address));
        }
        self.check()
    }

    /// One reply from every worker, checked by `accept`; a `Failed` reply names its rank.
    /// Replies `accept` does not take are kept for later waits.
    pub fn collect<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut accept: impl FnMut(usize, &ToLeader) -> Result<Option<T>>,
    ) -> Result<Vec<T>> {
        let deadline = Instant::now() + timeout;
        let mut got = BTreeMap::new();
        let mut offer = |rank: usize, msg: ToLeader, got: &mut BTreeMap<usize, T>| -> Result<()> {
            match accept(rank, &msg)? {
                Some(value) => drop(got.insert(rank, value)),
                None => self.keep(rank, msg),
            }
            Ok(())
        };
        for (rank, msg) in self.take_kept() {
            offer(rank, msg, &mut got)?;
        }
        while got.len() < self.peers.len() {
            let missing = || {
                self.peers
                    .iter()
                    .filter(|p| !got.contains_key(&p.rank))
                    .map(|p| format!("rank {} ({})", p.rank, p.address))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let on_late = || late(what, timeout, missing());
            if let Some((rank, msg)) = self.next_reply(deadline, on_late)? {
                offer(rank, msg, &mut got)?;
            }
        }
        Ok(got.into_values().collect())
    }

    /// The first reply from `rank` that `accept` takes; other replies are kept for later.
    pub fn await_from<T>(
        &self,
        rank: usize,
        what: &str,
        timeout: Duration,
        mut accept: impl FnMut(&ToLeader) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let mut kept = self.take_kept().into_iter();
        loop {
            let reply = match kept.next() {
                Some(reply) => Some(reply),
                None => {
                    let on_late = || {
                        late(
                            what,
                            timeout,
                            format!("rank {rank} ({})", self.address(rank)),
                        )
                    };
                    self.next_reply(deadline, on_late)?
                }
            };
            let Some((from, msg)) = reply else { continue };
            match (from == rank).then(|| accept(&msg)).flatten() {
                Some(value) => {
                    kept.for_each(|(r, m)| self.keep(r, m));
                    return Ok(value);
                }
                None => self.keep(from, msg),
            }
        }
    }

    /// Keeps a reply that came while rank 0 waited for another (the oldest go first).
    fn keep(&self, rank: usize, msg: ToLeader) {
        let mut kept = self.kept.borrow_mut();
        if kept.len() >= MAX_KEPT {
            kept.pop_front();
        }
        kept.push_back((rank, msg));
    }

    fn take_kept(&self) -> Vec<(usize, ToLeader)> {
        self.kept.borrow_mut().drain(..).collect()
    }

    /// Waits a little for the next reply; fails on a fault, a `Failed` reply, a stop, or the
    /// deadline.
    fn next_reply(
        &self,
        deadline: Instant,
        late: impl FnOnce() -> Error,
    ) -> Result<Option<(usize, ToLeader)>> {
        self.check()?;
        if crate::lifecycle::stop_requested() {
            return Err(Error::ShuttingDown);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        match self
            .replies
            .recv_timeout(left.min(Duration::from_millis(200)))
        {
            Ok((rank, ToLeader::Failed { error })) => Err(Error::Distributed(format!(
                "rank {rank} ({}): {error}",
                self.address(rank)
            ))),
            Ok(reply) => Ok(Some(reply)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => self.check().map(|_| None),
        }
    }

    fn address(&self, rank: usize) -> String {
        self.peers
            .iter()
            .find(|p| p.rank == rank)
            .map(|p| p.address.clone())
            .unwrap_or_default()
    }
}

/// The error for ranks that did not answer in time.
fn late(what: &str, timeout: Duration, who: String) -> Error {
    Error::Distributed(format!(
        "{who} did not answer {what} within {} s",
        timeout.as_secs()
    ))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.stop_heartbeat.take();
        self.fault.inbox.close("the cluster was closed");
        for peer in self.peers.iter() {
            if let Ok(w) = peer.writer.lock() {
                let _ = w.shutdown(std::net::Shutdown::Both);
            }
        }
        // The shut sockets end the readers' reads; the closed channel wakes the heartbeat.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A whole handshake must end within this: a silent or slow peer holds only its own thread,
/// and not for long.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

/// At most this many handshakes run at once; connections past it are closed at once.
const MAX_HANDSHAKES: usize = 64;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::link::{Link, LinkError, LinkOptions};

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn options(size: usize, join_timeout: Duration) -> std::io::Result<ClusterOptions> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Ok(ClusterOptions {
            size,
            control: format!("127.0.0.1:{port}"),
            rank_addresses: (0..size).map(|r| format!("host{r}:1")).collect(),
            hostfile_digest: "digest".into(),
            secret: Secret::new(Some("token"), ""),
            join_timeout,
            heartbeat: Duration::from_secs(1),
        })
    }

    /// Forms the cluster on a thread.
    fn form_later(opts: &ClusterOptions) -> mpsc::Receiver<Result<Cluster>> {
        let (tx, rx) = mpsc::channel();
        let opts = opts.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Cluster::form(&opts));
        });
        rx
    }

    /// `n` connections that never say anything, opened once rank 0 listens.
    fn idle(opts: &ClusterOptions, n: usize) -> std::result::Result<Vec<TcpStream>, String> {
        let start = Instant::now();
        let mut open = Vec::new();
        while open.len() < n {
            match TcpStream::connect(&opts.control) {
                Ok(s) => open.push(s),
                Err(_) if start.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(format!("rank 0 does not listen: {e}")),
            }
        }
        Ok(open)
    }

    fn join(opts: &ClusterOptions, rank: usize) -> std::result::Result<Link, LinkError> {
        Link::connect(&LinkOptions {
            rank,
            control: opts.control.clone(),
            hostfile_digest: opts.hostfile_digest.clone(),
            secret: opts.secret.clone(),
        })
    }

    #[test]
    fn idle_connections_do_not_delay_a_worker() -> TestResult {
        let opts = options(2, Duration::from_secs(20))?;
        let formed = form_later(&opts);
        let _idle = idle(&opts, 8)?;
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        let link = join(&opts, 1)?;
        let cluster = formed.recv_timeout(Duration::from_secs(5))??;
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(cluster.size(), 2);
        drop(cluster);
        drop(link);
        Ok(())
    }

    #[test]
    fn join_timeout_is_a_hard_deadline_whatever_strangers_do() -> TestResult {
        let opts = options(2, Duration::from_secs(2))?;
        let start = Instant::now();
        let formed = form_later(&opts);
        let _idle = idle(&opts, 8)?;
        let Err(e) = formed.recv_timeout(Duration::from_secs(5))? else {
            return Err("formed without a worker".into());
        };
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(3),
            "{took:?}"
        );
        assert!(
            e.to_string()
                .contains("rank 1 (host1:1) did not join within 2 s"),
            "{e}"
        );
        Ok(())
    }

    /// Rank 2 joins, and the 3-rank cluster forms with the first rank 1.
    fn rank_2_completes_the_cluster(
        opts: &ClusterOptions,
        formed: mpsc::Receiver<Result<Cluster>>,
        first: Link,
    ) -> TestResult {
        let second = join(opts, 2)?;
        let cluster = formed.recv_timeout(Duration::from_secs(5))??;
        assert_eq!(cluster.size(), 3);
        drop(cluster);
        drop((first, second));
        Ok(())
    }

    #[test]
    fn a_rank_that_joins_twice_is_refused() -> TestResult {
        let opts = options(3, Duration::from_secs(20))?;
        let formed = form_later(&opts);
        let _idle = idle(&opts, 1)?;
        let first = join(&opts, 1)?;
        match join(&opts, 1) {
            Err(LinkError::Rejected(why)) => assert!(why.contains("rank 1 joined twice"), "{why}"),
            Err(e) => return Err(format!("not refused as a duplicate: {e}").into()),
            Ok(_) => return Err("rank 1 joined twice".into()),
        }
        rank_2_completes_the_cluster(&opts, formed, first)
    }

    #[test]
    fn of_two_handshakes_for_one_rank_the_first_to_finish_wins() -> TestResult {
        let opts = options(3, Duration::from_secs(20))?;
        let formed = form_later(&opts);
        let mut slow = idle(&opts, 1)?.remove(0);
        slow.set_read_timeout(Some(Duration::from_secs(5)))?;
        let ours = nonce();
        let join_msg = ToLeader::Join {
            rank: 1,
            identity: Identity::current(),
            hostfile: opts.hostfile_digest.clone(),
            nonce: ours,
            free_memory: 0,
        };
        write_frame(&mut slow, &join_msg)?;
        let ToWorker::Challenge { nonce: theirs, .. } = read_frame(&mut slow)? else {
            return Err("no challenge".into());
        };
        // Another rank 1 starts later but finishes first.
        let first = join(&opts, 1)?;
        let proof = opts.secret.proof("worker", &theirs);
        write_frame(&mut slow, &ToLeader::Proof { proof })?;
        match read_frame(&mut slow)? {
            ToWorker::Rejected { reason } => assert!(reason.contains("joined twice"), "{reason}"),
            other => return Err(format!("the late duplicate got {other:?}").into()),
        }
        rank_2_completes_the_cluster(&opts, formed, first)
    }

    #[test]
    fn connections_past_the_cap_are_closed() -> TestResult {
        let opts = options(2, Duration::from_secs(3))?;
        let formed = form_later(&opts);
        let mut open = idle(&opts, MAX_HANDSHAKES + 6)?;
        std::thread::sleep(Duration::from_millis(300));
        let mut closed = 0;
        for s in &mut open {
            s.set_read_timeout(Some(Duration::from_millis(5)))?;
            if matches!(s.read(&mut [0u8; 1]), Ok(0)) {
                closed += 1;
            }
        }
        assert_eq!(closed, 6);
        assert!(formed.recv_timeout(Duration::from_secs(5))?.is_err());
        Ok(())
    }
}
