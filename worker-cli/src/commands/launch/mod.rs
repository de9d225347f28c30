//! `worker launch`: starts every rank of a hostfile from this machine over SSH. The
//! hostfile (and rank 0's model YAML) are written to the hosts first, ranks 1 and up are
//! started, `worker check` runs on rank 0's host against them, then rank 0 starts (unless
//! the host starts it). Logs stream here by rank; Ctrl-C, SIGTERM or any rank ending stops
//! them all.

mod logs;
mod plan;
mod remote;
mod ssh;

use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::CliResult;
use crate::args::LaunchArgs;
use plan::Plan;
use remote::{Fleet, Remote};

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot ssh to {host}: {message}")]
    Ssh { host: String, message: String },
    #[error("{ranks} on {host}: no executable worker at {path} (install it there, or name it with --remote-worker)")]
    NoWorker {
        ranks: String,
        host: String,
        path: String,
    },
    #[error("could not write {path} on {host}: {message}")]
    Upload {
        host: String,
        path: String,
        message: String,
    },
    #[error("{label} ended ({status}); its last lines:{lines}")]
    Exited {
        label: String,
        status: ExitStatus,
        lines: String,
    },
    #[error("`worker check` on {host} failed ({status}); its findings are above")]
    Check { host: String, status: ExitStatus },
    #[error("{0}")]
    Plan(String),
    #[error("a remote command line cannot be quoted: {0}")]
    Quote(String),
    #[error("could not run the ssh client: {0}")]
    Spawn(std::io::Error),
    #[error("while stopping: {}", .0.join("; "))]
    Unclean(Vec<String>),
}

pub fn run(args: LaunchArgs) -> CliResult {
    let plan = Plan::of(args)?;
    let stop = stop_on_signals()?;
    plan.upload()?;
    let mut fleet = Fleet::default();
    let ran = run_cluster(&plan, &mut fleet, &stop);
    let unclean = fleet.stop();
    ran?;
    match unclean.is_empty() {
        true => Ok(()),
        false => Err(LaunchError::Unclean(unclean).into()),
    }
}

/// SIGINT, SIGTERM and SIGHUP (the terminal closed) set a flag the launcher polls.
fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// Workers, the check, rank 0, then wait for a stop or a rank ending.
fn run_cluster(plan: &Plan, fleet: &mut Fleet, stop: &AtomicBool) -> Result<(), LaunchError> {
    if stop.load(Ordering::Relaxed) {
        return Ok(());
    }
    for rank in 1..plan.hosts.len() {
        fleet.0.push(Remote::start(&plan.ssh, plan.rank(rank)?)?);
    }
    if plan.check {
        let check = Remote::start(&plan.ssh, plan.check()?)?;
        match supervise(fleet, Some(check), stop)? {
            Watch::Stopped => return Ok(()),
            Watch::Checked => eprintln!("[launch] check passed"),
        }
    }
    match plan.workers_only {
        true => eprintln!(
            "[launch] ranks 1..{} running; rank 0 is the host's to start",
            plan.hosts.len() - 1
        ),
        false => {
            fleet.0.push(Remote::start(&plan.ssh, plan.rank(0)?)?);
            eprintln!(
                "[launch] rank 0 starting on {}, serving {}",
                plan.hosts[0], plan.addr
            );
        }
    }
    supervise(fleet, None, stop).map(|_| ())
}

/// How watching the processes ended.
enum Watch {
    Stopped,
    /// The check passed.
    Checked,
}

/// Polls until a stop signal, a process ending (an error: ranks run until stopped), or the
/// `check` passing.
fn supervise(
    fleet: &mut Fleet,
    mut check: Option<Remote>,
    stop: &AtomicBool,
) -> Result<Watch, LaunchError> {
    loop {
        if stop.load(Ordering::Relaxed) {
            eprintln!("[launch] stopping every rank");
            if let Some(check) = check {
                Fleet(vec![check]).stop();
            }
            return Ok(Watch::Stopped);
        }
        if let Some((i, status)) = fleet.first_exit()? {
            return Err(fleet.0[i].failure(status));
        }
        if let Some(c) = &mut check {
            if let Some(status) = c.exited()? {
                return checked(fleet, c, status);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The check's verdict; a rank that ended meanwhile is the better explanation of a failure.
fn checked(
    fleet: &mut Fleet,
    check: &mut Remote,
    status: ExitStatus,
) -> Result<Watch, LaunchError> {
    check.last_lines();
    if status.success() {
        return Ok(Watch::Checked);
    }
    if let Some((i, rank_status)) = fleet.first_exit()? {
        return Err(fleet.0[i].failure(rank_status));
    }
    match status.code() {
        Some(255) => Err(check.failure(status)),
        _ => Err(LaunchError::Check {
            host: check.host.clone(),
            status,
        }),
    }
}
