//! Rank 0's side of the control channel: the workers join over TCP, then rank 0 sends them
//! plans and watches them. A worker that disconnects or stops answering pings is a fault
//! that fails the request in flight within seconds, whatever MLX is blocked on.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// Waits for every worker to join, authenticates them and checks their builds.
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
        let mut joined: BTreeMap<usize, (TcpStream, u64)> = BTreeMap::new();
        while joined.len() + 1 < opts.size {
            match listener.accept() {
                Ok((stream, from)) => match handshake(stream, opts, &joined) {
                    Ok((rank, stream, free)) => {
                        tracing::info!(rank, %from, "worker joined");
                        joined.insert(rank, (stream, free));
                    }
                    Err(Refusal::Fatal(msg)) => return Err(Error::Distributed(msg)),
                    Err(Refusal::Ignore(msg)) => tracing::warn!(%from, "{msg}"),
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if crate::lifecycle::stop_requested() {
                        return Err(Error::ShuttingDown);
                    }
                    if Instant::now() >= deadline {
                        return Err(Error::Distributed(missing_ranks(opts, &joined)));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let peers: Vec<Peer> = joined
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
            let reader = peer.writer.lock().expect("fresh").try_clone();
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

enum Refusal {
    /// The deployment is wrong (another build, another hostfile): LoadModel must fail.
    Fatal(String),
    /// A stranger or a broken connection: ignore it and keep waiting.
    Ignore(String),
}

/// Authenticates one connecting worker; returns its rank and free memory.
fn handshake(
    stream: TcpStream,
    opts: &ClusterOptions,
    joined: &BTreeMap<usize, (TcpStream, u64)>,
) -> std::result::Result<(usize, TcpStream, u64), Refusal> {
    let io = |e: std::io::Error| Refusal::Ignore(format!("a worker's handshake failed: {e}"));
    stream.set_nonblocking(false).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    let mut s = stream;
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
    let reject = |s: &mut TcpStream, reason: String, fatal: bool| {
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
    };
    let address = opts.rank_addresses.get(rank).cloned().unwrap_or_default();
    if rank == 0 || rank >= opts.size {
        return Err(reject(
            &mut s,
            format!(
                "a worker claims rank {rank}, but the hostfile has ranks 0..{}",
                opts.size
            ),
            false,
        ));
    }
    if let Some(why) = Identity::current().mismatch(&identity) {
        return Err(reject(
            &mut s,
            format!("rank {rank} ({address}) cannot join: {why}"),
            true,
        ));
    }
    if hostfile != opts.hostfile_digest {
        return Err(reject(
            &mut s,
            format!("rank {rank} ({address}) cannot join: its hostfile differs from rank 0's"),
            true,
        ));
    }
    if joined.contains_key(&rank) {
        return Err(reject(&mut s, format!("rank {rank} joined twice"), false));
    }
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
    write_frame(&mut s, &ToWorker::Accepted).map_err(io)?;
    s.set_read_timeout(None).map_err(io)?;
    Ok((rank, s, free_memory))
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
