//! Rank 0's side of the control channel: the workers join over TCP (`join`), then rank 0
//! sends them plans and watches them. A worker that disconnects or stops answering pings is a
//! fault (`fault`) that fails the request in flight within seconds, whatever MLX is blocked on.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::board::RankBoard;
use super::fault::Fault;
use super::inbox::Inbox;
use super::join::{self, ClusterOptions};
use super::protocol::{ToLeader, ToWorker};
use super::wire::{read_frame, write_frame};
use crate::error::{Error, Result};

/// At most this many early replies are kept: more means the ranks are out of step (waits
/// `forget` the stale ones, so a cluster in step holds a few).
const MAX_KEPT: usize = 64;

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
    /// Each rank's part, health and step times, for the metrics.
    board: Arc<RankBoard>,
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
        Cluster::form_until(opts, &|| None)
    }

    /// `form`, ended early with `give_up`'s error when it has one (checked at every tick).
    pub fn form_until(opts: &ClusterOptions, give_up: join::GiveUp<'_>) -> Result<Cluster> {
        let members = join::join(opts, give_up)?;
        let peers: Vec<Peer> = members
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
        let rank_0 = opts.rank_addresses.first().cloned().unwrap_or_default();
        Ok(Cluster::watch(peers, opts.heartbeat, rank_0))
    }

    /// Starts a reader per worker and the heartbeat.
    fn watch(peers: Vec<Peer>, heartbeat: Duration, rank_0: String) -> Cluster {
        let addresses: Vec<String> = std::iter::once(rank_0)
            .chain(peers.iter().map(|p| p.address.clone()))
            .collect();
        let peers = Arc::new(peers);
        let watch = Watch {
            fault: Arc::new(Fault::default()),
            board: Arc::new(RankBoard::new(&addresses)),
            stop: Arc::new(AtomicBool::new(false)),
            last_seen: Arc::new(peers.iter().map(|_| Mutex::new(Instant::now())).collect()),
        };
        let (tx, replies) = mpsc::channel();
        let mut threads: Vec<JoinHandle<()>> = peers
            .iter()
            .enumerate()
            .map(|(i, peer)| watch.read(i, peer, tx.clone()))
            .collect();
        let (stop_heartbeat, woken) = mpsc::channel::<()>();
        threads.push(watch.beat(peers.clone(), heartbeat, woken));
        Cluster {
            peers,
            replies,
            kept: RefCell::new(VecDeque::new()),
            fault: watch.fault,
            board: watch.board,
            stop: watch.stop,
            stop_heartbeat: Some(stop_heartbeat),
            threads,
        }
    }

    pub fn size(&self) -> usize {
        self.peers.len() + 1
    }

    /// Where the last rank's outputs arrive when they come in control messages.
    pub fn inbox(&self) -> &Arc<Inbox> {
        self.fault.inbox()
    }

    pub fn fault(&self) -> &Arc<Fault> {
        &self.fault
    }

    /// Each rank's part, health and step times.
    pub fn board(&self) -> &Arc<RankBoard> {
        &self.board
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
                let why = format!("rank {} ({}) was lost: {e}", peer.rank, peer.address);
                self.board.lost(peer.rank, &why);
                self.fault.raise(why);
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
            let why = format!("rank {rank} ({}) was lost: {e}", peer.address);
            self.board.lost(rank, &why);
            self.fault.raise(why);
        }
        self.check()
    }

    /// One reply from every worker, checked by `accept`; a `Failed` reply names its rank.
    /// Replies `accept` does not take are kept for later waits.
    pub fn collect<T>(
        &self,
        what: &str,
        timeout: Duration,
        accept: impl FnMut(usize, &ToLeader) -> Result<Option<T>>,
    ) -> Result<Vec<T>> {
        self.collect_until(what, timeout, &|| None, accept)
    }

    /// `collect`, ended with `give_up`'s error when it gives one (it is asked at least every
    /// 200 ms): a LoadModel whose caller left stops waiting for the workers' parts.
    pub fn collect_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        give_up: join::GiveUp<'_>,
        mut accept: impl FnMut(usize, &ToLeader) -> Result<Option<T>>,
    ) -> Result<Vec<T>> {
        let deadline = Instant::now() + timeout;
        let mut got = BTreeMap::new();
        let mut offer = |rank: usize, msg: ToLeader, got: &mut BTreeMap<usize, T>| -> Result<()> {
            match accept(rank, &msg)? {
                Some(value) => drop(got.insert(rank, value)),
                None => self.keep(rank, msg)?,
            }
            Ok(())
        };
        for (rank, msg) in self.take_kept() {
            offer(rank, msg, &mut got)?;
        }
        while got.len() < self.peers.len() {
            if let Some(e) = give_up() {
                return Err(e);
            }
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
                    kept.try_for_each(|(r, m)| self.keep(r, m))?;
                    return Ok(value);
                }
                None => self.keep(from, msg)?,
            }
        }
    }

    /// Keeps a reply that came while rank 0 waited for another. Past `MAX_KEPT` the ranks
    /// are out of step: that is a fault, naming the last reply.
    fn keep(&self, rank: usize, msg: ToLeader) -> Result<()> {
        let mut kept = self.kept.borrow_mut();
        if kept.len() >= MAX_KEPT {
            drop(kept);
            self.fault.raise(format!(
                "rank 0 holds {MAX_KEPT} replies it did not wait for (the last: {} from rank \
                 {rank}); the ranks are out of step",
                msg.kind()
            ));
            return self.check();
        }
        kept.push_back((rank, msg));
        Ok(())
    }

    /// Drops the kept replies that no wait will take any more (`stale` says which).
    pub fn forget(&self, stale: impl Fn(&ToLeader) -> bool) {
        self.kept.borrow_mut().retain(|(_, msg)| !stale(msg));
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
            Ok((rank, ToLeader::Failed { error })) => Err(self.failed(rank, &error)),
            Ok(reply) => Ok(Some(reply)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => self.check().map(|_| None),
        }
    }

    /// Worker `rank`'s error, naming the rank and its address.
    pub fn failed(&self, rank: usize, error: &str) -> Error {
        Error::Distributed(format!("rank {rank} ({}): {error}", self.address(rank)))
    }

    fn address(&self, rank: usize) -> String {
        self.peers
            .iter()
            .find(|p| p.rank == rank)
            .map(|p| p.address.clone())
            .unwrap_or_default()
    }
}

/// What the readers and the heartbeat share.
struct Watch {
    fault: Arc<Fault>,
    board: Arc<RankBoard>,
    /// The cluster is being dropped: a closed connection is no fault.
    stop: Arc<AtomicBool>,
    /// When each worker was last heard from.
    last_seen: Arc<Vec<Mutex<Instant>>>,
}

impl Watch {
    /// Reads worker `i`'s messages: outputs go to the inbox, replies to `tx`, a failed step
    /// or a closed connection is a fault.
    fn read(&self, i: usize, peer: &Peer, tx: mpsc::Sender<(usize, ToLeader)>) -> JoinHandle<()> {
        let reader = peer
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_clone();
        let (fault, stop, seen, board) = (
            self.fault.clone(),
            self.stop.clone(),
            self.last_seen.clone(),
            self.board.clone(),
        );
        let (rank, address) = (peer.rank, peer.address.clone());
        let (lost_on, lost_fault) = (board.clone(), fault.clone());
        let lost = move |why: String| {
            lost_on.lost(rank, &why);
            lost_fault.raise(why);
        };
        std::thread::spawn(move || {
            let Ok(mut reader) = reader else { return };
            loop {
                let msg = match read_frame::<ToLeader>(&mut reader) {
                    Ok(msg) => msg,
                    Err(e) => {
                        if !stop.load(Ordering::SeqCst) {
                            lost(format!("rank {rank} ({address}) was lost: {e}"));
                        }
                        return;
                    }
                };
                *seen[i].lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                if let Some(times) = msg.times() {
                    board.report(rank, times);
                }
                match msg {
                    ToLeader::StepFailed { error } => {
                        lost(format!("rank {rank} ({address}) failed a step: {error}"));
                    }
                    ToLeader::Output {
                        seq, activations, ..
                    } => fault.inbox().deliver(seq, activations.0),
                    ToLeader::Pong => {}
                    msg => drop(tx.send((rank, msg))),
                }
            }
        })
    }

    /// Pings every `heartbeat` until `woken` closes (the cluster is dropped); a worker silent
    /// for three beats is a fault.
    fn beat(
        &self,
        peers: Arc<Vec<Peer>>,
        heartbeat: Duration,
        woken: mpsc::Receiver<()>,
    ) -> JoinHandle<()> {
        let (fault, stop, seen, board) = (
            self.fault.clone(),
            self.stop.clone(),
            self.last_seen.clone(),
            self.board.clone(),
        );
        std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = woken.recv_timeout(heartbeat) {
                for (i, peer) in peers.iter().enumerate() {
                    let silent = seen[i].lock().unwrap_or_else(|e| e.into_inner()).elapsed();
                    if silent > heartbeat * 3 && !stop.load(Ordering::SeqCst) {
                        let why = format!(
                            "rank {} ({}) stopped answering: silent for {:.1} s",
                            peer.rank,
                            peer.address,
                            silent.as_secs_f64()
                        );
                        board.lost(peer.rank, &why);
                        fault.raise(why);
                    }
                    let mut w = peer.writer.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = write_frame(&mut *w, &ToWorker::Ping);
                }
            }
        })
    }
}

/// The error for ranks that did not answer in time.
fn late(what: &str, timeout: Duration, who: String) -> Error {
    Error::Distributed(format!(
        "{who} did not answer {what} within {} s",
        timeout.as_secs()
    ))
}

/// A cluster of `workers` fake workers over loopback sockets, joined without a handshake:
/// the tests write the workers' replies themselves.
#[cfg(test)]
pub(crate) fn loopback(workers: usize) -> std::io::Result<(Cluster, Vec<TcpStream>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let (mut peers, mut ends) = (Vec::new(), Vec::new());
    for rank in 1..=workers {
        ends.push(TcpStream::connect(listener.local_addr()?)?);
        peers.push(Peer {
            rank,
            address: format!("host{rank}:1"),
            writer: Mutex::new(listener.accept()?.0),
            free_memory: 0,
        });
    }
    let watched = Cluster::watch(peers, Duration::from_secs(30), "host0:1".into());
    Ok((watched, ends))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.stop_heartbeat.take();
        self.fault.inbox().close("the cluster was closed");
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

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpListener;

    use super::*;
    use crate::distributed::join::{LinkError, LinkOptions, MAX_HANDSHAKES};
    use crate::distributed::link::Link;
    use crate::distributed::protocol::Identity;
    use crate::distributed::wire::nonce;
    use crate::distributed::wire::Secret;

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

    fn reply(end: &mut TcpStream, msg: &ToLeader) -> std::io::Result<()> {
        write_frame(end, msg)
    }

    fn ready(seq: u64) -> ToLeader {
        ToLeader::Ready {
            seq,
            activations: None,
            times: None,
        }
    }

    fn ready_seq(msg: &ToLeader) -> Option<u64> {
        match msg {
            ToLeader::Ready { seq, .. } => Some(*seq),
            _ => None,
        }
    }

    /// Replies come in any order and interleaved with replies to other waits: each wait takes
    /// its own, by rank and step, and keeps the rest for the wait they belong to.
    #[test]
    fn reordered_replies_reach_the_wait_they_belong_to() -> TestResult {
        let (cluster, mut ends) = loopback(2)?;
        reply(&mut ends[1], &ready(8))?;
        reply(&mut ends[1], &ready(7))?;
        reply(&mut ends[0], &ready(8))?;
        reply(&mut ends[0], &ready(7))?;
        let limit = Duration::from_secs(5);
        let took = cluster.await_from(2, "step 7", limit, |m| ready_seq(m).filter(|s| *s == 7))?;
        assert_eq!(took, 7);
        let short = Duration::from_millis(300);
        let seven = cluster.collect("step 7", short, |_, m| Ok(ready_seq(m).filter(|s| *s == 7)));
        assert!(
            seven.is_err(),
            "rank 2's step 7 was taken: only rank 1's is left"
        );
        let eight =
            cluster.collect("step 8", limit, |_, m| Ok(ready_seq(m).filter(|s| *s == 8)))?;
        assert_eq!(eight, vec![8, 8], "rank 1's then rank 2's, in rank order");
        Ok(())
    }

    /// Replies nobody waits for are a fault past `MAX_KEPT`, naming the last one, unless a
    /// wait forgot them as stale first.
    #[test]
    fn unclaimed_replies_are_bounded_by_a_fault_not_dropped() -> TestResult {
        let (cluster, mut ends) = loopback(1)?;
        let limit = Duration::from_secs(5);
        for seq in 0..MAX_KEPT as u64 {
            reply(&mut ends[0], &ready(seq))?;
        }
        reply(&mut ends[0], &ToLeader::Freed)?;
        cluster.await_from(1, "Free", limit, |m| {
            matches!(m, ToLeader::Freed).then_some(())
        })?;
        cluster.forget(|m| ready_seq(m).is_some_and(|s| s < 60));
        for seq in MAX_KEPT as u64..2 * MAX_KEPT as u64 {
            reply(&mut ends[0], &ready(seq))?;
        }
        reply(&mut ends[0], &ToLeader::Freed)?;
        let err = cluster
            .await_from(1, "Free", limit, |m| {
                matches!(m, ToLeader::Freed).then_some(())
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("64 replies it did not wait for"), "{err}");
        assert!(err.contains("Ready from rank 1"), "{err}");
        assert!(cluster.fault().get().is_some(), "the cluster is failed");
        Ok(())
    }

    /// A worker whose step failed fails the cluster, naming the rank and its error.
    #[test]
    fn a_failed_step_on_a_worker_is_a_fault_naming_it() -> TestResult {
        let (cluster, mut ends) = loopback(2)?;
        let error = "out of memory".to_string();
        reply(&mut ends[1], &ToLeader::StepFailed { error })?;
        let err = cluster
            .await_from(1, "step 1", Duration::from_secs(5), ready_seq)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rank 2 (host2:1) failed a step: out of memory"),
            "{err}"
        );
        Ok(())
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
