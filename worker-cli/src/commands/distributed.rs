//! `worker mlx-distributed`: rank 0 serves the gRPC backend with this hostfile as its
//! default; ranks 1 and up join rank 0 and follow it until stopped.

use backend::engine::follower::{self, FollowerOptions};
use backend::options::Settings;
use backend::server::ServerOptions;

use crate::args::DistributedArgs;

pub fn run(args: DistributedArgs) -> Result<(), Box<dyn std::error::Error>> {
    let yaml = super::config::read(args.config.as_deref())?;
    let hostfile = super::config::required(args.hostfile, yaml.hostfile.clone(), "--hostfile")?;
    run_rank(RankOptions {
        preload: match args.rank {
            0 => preload(
                &yaml,
                &hostfile,
                Preload {
                    model: args.model,
                    model_path: args.model_path,
                    ship_model: args.ship_model,
                },
            ),
            _ => None,
        },
        hostfile,
        rank: args.rank,
        backend: args
            .backend
            .or(yaml.backend)
            .unwrap_or_else(|| "ring".into()),
        addr: args.addr,
        coordinator: args.coordinator.or(yaml.coordinator),
        control_port: args.control_port.or(yaml.control_port),
        token: args.token,
    })
}

/// Rank 0's flags over the YAML's model.
struct Preload {
    model: Option<String>,
    model_path: Option<std::path::PathBuf>,
    ship_model: bool,
}

/// What rank 0 loads before serving: the YAML's request, its model replaced by `--model`
/// (alone, a request with the model and the rank's flags as its defaults), shipped to the
/// workers with `--ship-model`.
fn preload(
    yaml: &super::config::FromYaml,
    hostfile: &std::path::Path,
    flags: Preload,
) -> Option<backend::options::LoadRequest> {
    let mut req = match (yaml.preload(hostfile), &flags.model) {
        (Some(req), _) => req,
        (None, Some(_)) => backend::options::LoadRequest::default(),
        (None, None) => return None,
    };
    if let Some(m) = flags.model {
        req.model = m;
    }
    if let Some(p) = flags.model_path {
        req.model_path = p.display().to_string();
    }
    if flags.ship_model {
        req.options.push("ship_model:true".into());
    }
    Some(req)
}

/// One rank of a cluster, however its hostfile and rank were found.
pub struct RankOptions {
    pub hostfile: std::path::PathBuf,
    pub rank: usize,
    pub backend: String,
    /// Rank 0: where to serve gRPC.
    pub addr: String,
    pub coordinator: Option<String>,
    pub control_port: Option<u16>,
    /// The control channel's secret (else the hostfile's digest).
    pub token: Option<String>,
    /// Rank 0: a model to load before serving (`--config`).
    pub preload: Option<backend::options::LoadRequest>,
}

/// Rank 0 serves gRPC with the hostfile as its default; the others follow rank 0.
pub fn run_rank(args: RankOptions) -> Result<(), Box<dyn std::error::Error>> {
    let hostfile = super::hostfile_for_rank(&args.hostfile, &args.backend, args.rank)?;
    if args.rank == 0 {
        return backend::server::run(ServerOptions {
            settings: rank0_settings(&args),
            addr: args.addr,
            preload: args.preload,
        });
    }
    let span = tracing::info_span!("rank", n = args.rank);
    let _enter = span.enter();
    // SIGTERM and SIGINT stop the rank between steps (a second one, or 4.5 s, ends it now).
    backend::lifecycle::watch_signals()?;
    follower::run(&FollowerOptions {
        rank: args.rank,
        hostfile,
        coordinator: args.coordinator,
        control_port: args.control_port,
        token: args.token,
        membership: follower::Membership::Fixed,
    })?;
    Ok(())
}

/// What LoadModel falls back on when its options do not say: this rank's flags, by the
/// variables they stand for.
fn rank0_settings(args: &RankOptions) -> Settings {
    let mut s = Settings::default()
        .option("hostfile", args.hostfile.display().to_string())
        .option("distributed_backend", args.backend.clone());
    let given = [
        ("control_port", args.control_port.map(|p| p.to_string())),
        ("coordinator", args.coordinator.clone()),
    ];
    for (option, value) in given {
        if let Some(v) = value {
            s = s.option(option, v);
        }
    }
    if let Some(token) = &args.token {
        s = s.with("MLX_DISTRIBUTED_TOKEN", token.clone());
    }
    s
}
