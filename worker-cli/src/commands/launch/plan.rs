//! What `worker launch` starts where: the flags over the `--config` YAML, the hostfile's
//! hosts, and each remote command line.

use std::path::{Path, PathBuf};

use super::remote::Start;
use super::ssh::{self, Ssh, Upload};
use super::LaunchError;
use crate::args::LaunchArgs;
use crate::commands::{config, transport, CliResult};

/// Everything the launch needs, resolved once before anything starts.
pub struct Plan {
    pub ssh: Ssh,
    /// Rank i's ssh host.
    pub hosts: Vec<String>,
    pub addr: String,
    pub check: bool,
    pub workers_only: bool,
    hostfile: Vec<u8>,
    remote_hostfile: String,
    /// The YAML here and where rank 0 reads it.
    config: Option<(PathBuf, String)>,
    worker: String,
    backend: String,
    /// `--model` (rank 0 loads it; the check looks for it, or for the YAML's).
    model: Option<String>,
    checked_model: Option<String>,
    model_path: Option<PathBuf>,
    /// `--ship-model`: rank 0 ships the workers their shares.
    ship_model: bool,
    coordinator: Option<String>,
    control_port: Option<u16>,
    token: Option<String>,
    join_timeout: u64,
    worker_args: Vec<String>,
}

impl Plan {
    pub fn of(args: LaunchArgs) -> CliResult<Plan> {
        let yaml = config::read(args.config.as_deref())?;
        let hostfile_path = config::required(args.hostfile, yaml.hostfile, "--hostfile")?;
        let backend = args
            .backend
            .or(yaml.backend)
            .unwrap_or_else(|| "ring".into());
        let (hostfile, hosts) = read_hosts(&hostfile_path, &backend)?;
        let config = match args.config {
            Some(local) => {
                let remote = remote_path(args.remote_config, &local)?;
                Some((local, remote))
            }
            None => None,
        };
        Ok(Plan {
            ssh: ssh_of(
                args.ssh_user,
                args.ssh_port,
                args.ssh_identity,
                args.ssh_options,
                args.connect_timeout,
            )?,
            hosts,
            addr: args.addr,
            check: !args.no_check,
            workers_only: args.workers_only,
            hostfile,
            remote_hostfile: remote_path(args.remote_hostfile, &hostfile_path)?,
            config,
            worker: remote_worker(args.remote_worker)?,
            backend,
            checked_model: args.model.clone().or(yaml.model),
            ship_model: args.ship_model || yaml.ship_model,
            model: args.model,
            model_path: args.model_path,
            coordinator: args.coordinator.or(yaml.coordinator),
            control_port: args.control_port.or(yaml.control_port),
            token: args.token,
            join_timeout: args.join_timeout,
            worker_args: args.worker_args,
        })
    }

    /// Writes the hostfile to every host (finding the worker binary there) and the YAML to
    /// rank 0's.
    pub fn upload(&self) -> Result<(), LaunchError> {
        let mut done: Vec<&str> = Vec::new();
        for host in &self.hosts {
            if done.contains(&host.as_str()) {
                continue;
            }
            self.ssh.upload(Upload {
                host,
                path: &self.remote_hostfile,
                bytes: &self.hostfile,
                worker: Some((&self.worker, self.ranks_on(host))),
            })?;
            done.push(host);
        }
        match (&self.config, self.workers_only) {
            (Some((local, remote)), false) => {
                let bytes = std::fs::read(local)
                    .map_err(|e| LaunchError::Plan(format!("--config {}: {e}", local.display())))?;
                self.ssh.upload(Upload {
                    host: &self.hosts[0],
                    path: remote,
                    bytes: &bytes,
                    worker: None,
                })
            }
            _ => Ok(()),
        }
    }

    /// `rank 1` or `ranks 0, 2`: the ranks `host` runs.
    fn ranks_on(&self, host: &str) -> String {
        let ranks: Vec<String> = (0..self.hosts.len())
            .filter(|&r| self.hosts[r] == host)
            .map(|r| r.to_string())
            .collect();
        match ranks.len() {
            1 => format!("rank {}", ranks[0]),
            _ => format!("ranks {}", ranks.join(", ")),
        }
    }

    /// `worker mlx-distributed` for `rank` on its host.
    pub fn rank(&self, rank: usize) -> Result<Start<'_>, LaunchError> {
        let mut args = vec!["mlx-distributed".into(), "--rank".into(), rank.to_string()];
        args.extend(self.cluster_flags());
        if rank == 0 {
            args.extend(["--addr".into(), self.addr.clone()]);
            let config = self.config.as_ref().map(|(_, remote)| remote.clone());
            add(&mut args, "--config", config);
            add(&mut args, "--model", self.model.clone());
            add(
                &mut args,
                "--model-path",
                self.model_path.as_ref().map(|p| p.display().to_string()),
            );
            if self.ship_model {
                args.push("--ship-model".into());
            }
        }
        args.extend(self.worker_args.iter().cloned());
        Ok(Start {
            label: format!("rank {rank} {}", self.hosts[rank]),
            host: &self.hosts[rank],
            command: ssh::wrapped(&self.worker, &args)?,
            token: self.token.as_deref(),
        })
    }

    /// `worker check` on rank 0's host, playing rank 0's control side to the workers.
    pub fn check(&self) -> Result<Start<'_>, LaunchError> {
        let mut args = vec!["check".into()];
        args.extend(self.cluster_flags());
        args.extend(["--join-timeout".into(), self.join_timeout.to_string()]);
        add(&mut args, "--model", self.checked_model.clone());
        if self.ship_model {
            args.push("--ship-model".into());
        }
        add(
            &mut args,
            "--model-path",
            self.model_path.as_ref().map(|p| p.display().to_string()),
        );
        Ok(Start {
            label: format!("check {}", self.hosts[0]),
            host: &self.hosts[0],
            command: ssh::wrapped(&self.worker, &args)?,
            token: self.token.as_deref(),
        })
    }

    /// The flags every rank and the check share.
    fn cluster_flags(&self) -> Vec<String> {
        let mut args = vec![
            "--hostfile".into(),
            self.remote_hostfile.clone(),
            "--backend".into(),
            self.backend.clone(),
        ];
        add(&mut args, "--coordinator", self.coordinator.clone());
        add(
            &mut args,
            "--control-port",
            self.control_port.map(|p| p.to_string()),
        );
        args
    }
}

fn add(args: &mut Vec<String>, flag: &str, value: Option<String>) {
    if let Some(v) = value {
        args.extend([flag.to_string(), v]);
    }
}

/// The hostfile's bytes (checked as the ranks will read it) and each rank's ssh host.
fn read_hosts(path: &Path, backend: &str) -> CliResult<(Vec<u8>, Vec<String>)> {
    let parsed = backend::distributed::Hostfile::read(path, transport(backend))?;
    let text = std::fs::read_to_string(path)?;
    let hosts = backend::distributed::ssh_hosts(&text).map_err(|e| {
        format!(
            "hostfile {}: no host to ssh to for every rank ({e}); list them in the mlx.launch \
             format (`[{{\"ssh\": \"host\", \"ips\": [...]}}]`) or as ring addresses",
            path.display()
        )
    })?;
    if hosts.len() != parsed.size() {
        return Err(format!(
            "hostfile {}: {} ranks but {} ssh hosts",
            path.display(),
            parsed.size(),
            hosts.len()
        )
        .into());
    }
    Ok((text.into_bytes(), hosts))
}

/// The path on the hosts: the flag's, else the absolute path of the local file.
fn remote_path(flag: Option<String>, local: &Path) -> Result<String, LaunchError> {
    match flag {
        Some(p) => Ok(p),
        None => std::path::absolute(local)
            .map(|p| p.display().to_string())
            .map_err(|e| LaunchError::Plan(format!("{}: {e}", local.display()))),
    }
}

/// The worker binary on the hosts: the flag's, else this one's path.
fn remote_worker(flag: Option<String>) -> Result<String, LaunchError> {
    match flag {
        Some(p) => Ok(p),
        None => std::env::current_exe()
            .map(|p| p.display().to_string())
            .map_err(|e| {
                LaunchError::Plan(format!("this binary's path: {e} (use --remote-worker)"))
            }),
    }
}

/// The ssh settings, each `--ssh-option` checked to be `KEY=VALUE`.
fn ssh_of(
    user: Option<String>,
    port: Option<u16>,
    identity: Option<PathBuf>,
    options: Vec<String>,
    connect_timeout: u64,
) -> Result<Ssh, LaunchError> {
    if let Some(bad) = options
        .iter()
        .find(|o| !o.contains('=') || o.starts_with('='))
    {
        return Err(LaunchError::Plan(format!(
            "--ssh-option {bad:?}: expected KEY=VALUE (e.g. StrictHostKeyChecking=accept-new)"
        )));
    }
    Ok(Ssh {
        user,
        port,
        identity,
        options,
        connect_timeout,
    })
}
