//! The processes the launcher runs on the hosts (ranks and the check), each one local `ssh`
//! client whose stdin keeps the remote side alive: closing it is the stop.

use std::io::Write;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::logs::{self, Stream, Tail};
use super::ssh::Ssh;
use super::LaunchError;

/// How long the ranks get to end after the stop (a rank's own limit is 4.5 s); local `ssh`
/// clients still running then are killed (the connection's end stops the remote side).
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// One remote process, e.g. `rank 1 10.77.0.12`.
pub struct Remote {
    pub label: String,
    pub host: String,
    child: Child,
    /// Open while the process should run.
    stdin: Option<ChildStdin>,
    logs: Vec<JoinHandle<()>>,
    tail: Tail,
}

/// What to start on a host.
pub struct Start<'a> {
    pub label: String,
    pub host: &'a str,
    /// The remote shell command line (`ssh::wrapped`).
    pub command: String,
    pub token: Option<&'a str>,
}

impl Remote {
    /// Starts `start.command` on its host, its output forwarded with its label.
    pub fn start(ssh: &Ssh, start: Start) -> Result<Remote, LaunchError> {
        let mut child = ssh
            .command(start.host, &start.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(LaunchError::Spawn)?;
        let mut stdin = child.stdin.take();
        if let Some(pipe) = &mut stdin {
            // The wrapper's first line; a failed write shows as the process's exit.
            let _ = writeln!(pipe, "{}", start.token.unwrap_or(""));
        }
        let tail = Tail::default();
        let mut logs = Vec::new();
        if let Some(out) = child.stdout.take() {
            logs.push(
                logs::forward(out, &start.label, Stream::Stdout, tail.clone())
                    .map_err(LaunchError::Spawn)?,
            );
        }
        if let Some(err) = child.stderr.take() {
            logs.push(
                logs::forward(err, &start.label, Stream::Stderr, tail.clone())
                    .map_err(LaunchError::Spawn)?,
            );
        }
        Ok(Remote {
            label: start.label,
            host: start.host.to_string(),
            child,
            stdin,
            logs,
            tail,
        })
    }

    /// Its exit status, once it has exited.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>, LaunchError> {
        self.child.try_wait().map_err(LaunchError::Spawn)
    }

    /// Asks the remote side to stop (see `ssh::WRAPPER`).
    fn close(&mut self) {
        self.stdin = None;
    }

    /// Its last lines, once its output has ended.
    pub fn last_lines(&mut self) -> String {
        for handle in self.logs.drain(..) {
            let _ = handle.join();
        }
        self.tail.text()
    }

    /// Why it ended early, naming its rank and host.
    pub fn failure(&mut self, status: ExitStatus) -> LaunchError {
        let lines = self.last_lines();
        match status.code() {
            Some(255) => LaunchError::Ssh {
                host: self.host.clone(),
                message: lines,
            },
            _ => LaunchError::Exited {
                label: self.label.clone(),
                status,
                lines,
            },
        }
    }
}

/// Every process started so far; all are stopped when it is dropped.
#[derive(Default)]
pub struct Fleet(pub Vec<Remote>);

impl Fleet {
    /// The first process that has exited, and its status.
    pub fn first_exit(&mut self) -> Result<Option<(usize, ExitStatus)>, LaunchError> {
        for (i, remote) in self.0.iter_mut().enumerate() {
            if let Some(status) = remote.exited()? {
                return Ok(Some((i, status)));
            }
        }
        Ok(None)
    }

    /// Stops everything (stdin closed; after [`STOP_LIMIT`], the local clients killed) and
    /// names the processes that did not end cleanly.
    pub fn stop(&mut self) -> Vec<String> {
        for remote in &mut self.0 {
            remote.close();
        }
        let start = Instant::now();
        let mut unclean = Vec::new();
        for mut remote in self.0.drain(..) {
            let status = loop {
                match remote.exited() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if start.elapsed() < STOP_LIMIT => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => break None,
                }
            };
            match status {
                Some(s) if s.success() => {}
                Some(s) => unclean.push(format!("{} exited with {s}", remote.label)),
                None => {
                    let _ = remote.child.kill();
                    let _ = remote.child.wait();
                    unclean.push(format!(
                        "{} did not stop within {STOP_LIMIT:?}",
                        remote.label
                    ));
                }
            }
            remote.last_lines();
        }
        unclean
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop();
    }
}
