//! Rank 0's HTTP listeners (gRPC and metrics) under limits, so no crowd of connections can
//! take the process's file descriptors or keep real clients out: a connection must finish
//! its handshake (the HTTP/2 preface, or an HTTP/1 request head) within a whole deadline,
//! handshakes in flight are bounded (a newer one ends the oldest, so a client that speaks at
//! once always gets in), open connections are capped under the descriptor limit, and a
//! connection that sends nothing for the idle time is closed.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

use crate::options::Env;

/// Seconds without a byte from the client before a connection is closed.
pub const IDLE_ENV: &str = "MLX_DISTRIBUTED_IDLE_SECS";
/// Seconds a new connection has to finish its handshake.
pub const HANDSHAKE_ENV: &str = "MLX_DISTRIBUTED_HANDSHAKE_SECS";
/// Open gRPC connections at most (the metrics listener takes a quarter of it).
pub const MAX_CONNECTIONS_ENV: &str = "MLX_DISTRIBUTED_MAX_CONNECTIONS";

const IDLE_DEFAULT: u64 = 300;
const HANDSHAKE_DEFAULT: u64 = 10;
const MAX_CONNECTIONS_DEFAULT: usize = 256;

/// The end of an HTTP/1 request head, also inside the HTTP/2 preface
/// (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`).
const HEAD_END: &[u8; 4] = b"\r\n\r\n";

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{name}={value:?}: {why}")]
    Setting {
        name: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("cannot listen on {addr}: {cause}")]
    Bind { addr: SocketAddr, cause: io::Error },
}

/// A listener's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections past their handshake at once; more are closed as they finish it.
    pub max_open: usize,
    /// Handshakes in flight at once; a newer one ends the oldest.
    pub max_handshakes: usize,
    /// The whole handshake, however the peer paces its bytes.
    pub handshake: Duration,
    /// No byte from the peer for this long closes the connection.
    pub idle: Duration,
}

impl Limits {
    /// The gRPC listener's limits from the environment, checked, and kept under a quarter
    /// of the descriptor limit.
    pub fn grpc(env: &dyn Env) -> Result<Limits, ListenError> {
        let idle = secs(env, IDLE_ENV, IDLE_DEFAULT)?;
        let handshake = secs(env, HANDSHAKE_ENV, HANDSHAKE_DEFAULT)?;
        let max = count(env, MAX_CONNECTIONS_ENV, MAX_CONNECTIONS_DEFAULT)?;
        let fds = fd_limit();
        Ok(Limits {
            max_open: max.min(fds / 4).max(4),
            max_handshakes: (max / 4).min(fds / 8).max(4),
            handshake,
            idle,
        })
    }

    /// The metrics listener's: a quarter of the gRPC listener's connections.
    pub fn metrics(grpc: Limits) -> Limits {
        Limits {
            max_open: (grpc.max_open / 4).max(4),
            max_handshakes: (grpc.max_handshakes / 2).max(4),
            ..grpc
        }
    }
}

fn secs(env: &dyn Env, name: &'static str, default: u64) -> Result<Duration, ListenError> {
    let Some(value) = env.var(name).filter(|v| !v.is_empty()) else {
        return Ok(Duration::from_secs(default));
    };
    match value.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(ListenError::Setting {
            name,
            value,
            why: "must be a number of seconds above 0 and at most 86400",
        }),
    }
}

fn count(env: &dyn Env, name: &'static str, default: usize) -> Result<usize, ListenError> {
    let Some(value) = env.var(name).filter(|v| !v.is_empty()) else {
        return Ok(default);
    };
    match value.trim().parse::<usize>() {
        Ok(n) if (4..=65_536).contains(&n) => Ok(n),
        _ => Err(ListenError::Setting {
            name,
            value,
            why: "must be a whole number from 4 to 65536",
        }),
    }
}

/// The soft limit on open files (1024 when it cannot be read).
pub fn fd_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// Raises the soft limit on open files to the hard limit, as servers do: the default 1024
/// is small beside the connection caps and the model's files.
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct they are given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= limit.rlim_max
        {
            return;
        }
        let from = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            tracing::debug!(from, to = limit.rlim_max, "raised the open-file limit");
        }
    }
}

/// A warning at most once a second per call site, so a flood does not flood the log.
pub struct RateLimited(Mutex<Option<Instant>>);

impl RateLimited {
    pub const fn new() -> RateLimited {
        RateLimited(Mutex::new(None))
    }

    /// Whether a warning may be logged now.
    pub fn ready(&self) -> bool {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let ready = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if ready {
            *last = Some(Instant::now());
        }
        ready
    }
}

impl Default for RateLimited {
    fn default() -> Self {
        RateLimited::new()
    }
}

/// One handshake in flight, as the listener sees it (to end it when it is the oldest).
#[derive(Default)]
struct Ticket {
    evicted: AtomicBool,
    done: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Ticket {
    fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A bound socket that hands out [`Conn`]s under its [`Limits`].
pub struct Guarded {
    listener: TcpListener,
    limits: Limits,
    /// `gRPC` or `metrics`, for the log.
    name: &'static str,
    open: Arc<Semaphore>,
    pending: Mutex<VecDeque<Arc<Ticket>>>,
    refusals: Arc<RateLimited>,
}

impl Guarded {
    pub async fn bind(
        addr: SocketAddr,
        limits: Limits,
        name: &'static str,
    ) -> Result<Guarded, ListenError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|cause| ListenError::Bind { addr, cause })?;
        Ok(Guarded::new(listener, limits, name))
    }

    pub fn new(listener: TcpListener, limits: Limits, name: &'static str) -> Guarded {
        tracing::debug!(name, ?limits, "listener limits");
        Guarded {
            listener,
            limits,
            name,
            open: Arc::new(Semaphore::new(limits.max_open)),
            pending: Mutex::new(VecDeque::new()),
            refusals: Arc::new(RateLimited::new()),
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection; accept errors (out of descriptors) are logged, rate-limited,
    /// and waited out.
    pub async fn accept(&self) -> (Conn, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok((io, from)) => {
                    let _ = io.set_nodelay(true);
                    return (self.admit(io), from);
                }
                Err(e) => {
                    if self.refusals.ready() {
                        tracing::warn!(listener = self.name, "accept failed: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Registers a handshake, ending the oldest when all slots are taken.
    fn admit(&self, io: TcpStream) -> Conn {
        let ticket = Arc::new(Ticket::default());
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|t| !t.done.load(Ordering::SeqCst));
        if pending.len() >= self.limits.max_handshakes {
            if let Some(oldest) = pending.pop_front() {
                oldest.evict();
                if self.refusals.ready() {
                    tracing::warn!(
                        listener = self.name,
                        "{} handshakes at once; ended the oldest",
                        self.limits.max_handshakes
                    );
                }
            }
        }
        pending.push_back(ticket.clone());
        let now = Instant::now();
        Conn {
            io,
            phase: Phase::Handshake { ticket, matched: 0 },
            until: now + self.limits.handshake,
            idle: self.limits.idle,
            timer: Box::pin(tokio::time::sleep_until(
                (now + self.limits.handshake).into(),
            )),
            open: self.open.clone(),
            name: self.name,
            refusals: self.refusals.clone(),
        }
    }
}

impl axum::serve::Listener for Guarded {
    type Io = Conn;
    type Addr = SocketAddr;

    fn accept(&mut self) -> impl std::future::Future<Output = (Conn, SocketAddr)> + Send {
        Guarded::accept(self)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

enum Phase {
    /// Waiting for the end of the preface or request head (`matched` bytes of it seen).
    Handshake { ticket: Arc<Ticket>, matched: usize },
    /// Past it, holding one of the open connections' permits.
    Open { _permit: OwnedSemaphorePermit },
}

/// An accepted connection under its listener's limits: reads fail (and the server closes
/// it) once the handshake's deadline or the idle time passes, or when it is ended for a
/// newer handshake.
pub struct Conn {
    io: TcpStream,
    phase: Phase,
    /// The handshake's deadline, then the last read plus `idle`.
    until: Instant,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    open: Arc<Semaphore>,
    name: &'static str,
    refusals: Arc<RateLimited>,
}

impl Conn {
    /// Bytes just read: the idle clock restarts once the handshake is over, and the
    /// handshake ends at the end of its head, if an open slot is free.
    fn advance(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Phase::Handshake { ticket, matched } = &mut self.phase else {
            self.until = Instant::now() + self.idle;
            return Ok(());
        };
        for &b in bytes {
            *matched = match b {
                _ if b == HEAD_END[*matched] => *matched + 1,
                b'\r' => 1,
                _ => 0,
            };
            if *matched == HEAD_END.len() {
                break;
            }
        }
        if *matched < HEAD_END.len() {
            return Ok(());
        }
        ticket.done.store(true, Ordering::SeqCst);
        let Ok(permit) = self.open.clone().try_acquire_owned() else {
            if self.refusals.ready() {
                tracing::warn!(
                    listener = self.name,
                    "too many open connections; closed one"
                );
            }
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "too many open connections",
            ));
        };
        self.phase = Phase::Open { _permit: permit };
        self.until = Instant::now() + self.idle;
        Ok(())
    }

    /// Nothing to read yet: an error once the connection is out of time or ended, else
    /// the timer is armed to wake the reader then.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if let Phase::Handshake { ticket, .. } = &self.phase {
            *ticket.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            if ticket.evicted.load(Ordering::SeqCst) {
                return Some(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "ended for a newer handshake",
                ));
            }
        }
        let until = tokio::time::Instant::from(self.until);
        if self.timer.deadline() != until {
            self.timer.as_mut().reset(until);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Some(io::Error::new(io::ErrorKind::TimedOut, self.why())),
            Poll::Pending => None,
        }
    }

    fn why(&self) -> &'static str {
        match self.phase {
            Phase::Handshake { .. } => "the handshake took too long",
            Phase::Open { .. } => "idle too long",
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Phase::Handshake { ticket, .. } = &self.phase {
            ticket.done.store(true, Ordering::SeqCst);
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => Poll::Ready(this.advance(&buf.filled()[before..])),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = <TcpStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Vars(HashMap<&'static str, &'static str>);

    impl Env for Vars {
        fn var(&self, key: &str) -> Option<String> {
            self.0.get(key).map(|v| v.to_string())
        }
    }

    #[test]
    fn limits_are_read_checked_and_kept_under_the_descriptor_limit() {
        let fds = fd_limit();
        let defaults = Limits::grpc(&Vars(HashMap::new()));
        let Ok(l) = defaults else {
            panic!("defaults refused: {defaults:?}");
        };
        assert_eq!(l.idle, Duration::from_secs(IDLE_DEFAULT));
        assert_eq!(l.handshake, Duration::from_secs(HANDSHAKE_DEFAULT));
        assert!(l.max_open <= (fds / 4).max(4) && l.max_handshakes <= (fds / 8).max(4));
        let m = Limits::metrics(l);
        assert!(m.max_open <= l.max_open && m.max_handshakes <= l.max_handshakes);
        let set = Vars(HashMap::from([
            (IDLE_ENV, "2.5"),
            (MAX_CONNECTIONS_ENV, "8"),
        ]));
        let Ok(l) = Limits::grpc(&set) else {
            panic!("valid settings refused");
        };
        assert_eq!(l.idle, Duration::from_millis(2500));
        assert_eq!((l.max_open, l.max_handshakes), (8, 4));
        for (name, value) in [
            (IDLE_ENV, "0"),
            (HANDSHAKE_ENV, "soon"),
            (MAX_CONNECTIONS_ENV, "3"),
            (MAX_CONNECTIONS_ENV, "-1"),
        ] {
            let err = Limits::grpc(&Vars(HashMap::from([(name, value)])));
            let Err(e) = err else {
                panic!("{name}={value} accepted");
            };
            assert!(
                e.to_string().starts_with(&format!("{name}=\"{value}\"")),
                "{e}"
            );
        }
    }
}
