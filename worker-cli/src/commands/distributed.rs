//! `worker mlx-distributed`: rank 0 serves the gRPC backend with this hostfile as its
//! default; ranks 1 and up join rank 0 and follow it until stopped.

use backend::engine::follower::{self, FollowerOptions};

use crate::args::DistributedArgs;

pub fn run(args: DistributedArgs) -> Result<(), Box<dyn std::error::Error>> {
    run_rank(RankOptions {
        hostfile: args.hostfile,
        rank: args.rank,
        backend: args.backend,
        addr: args.addr,
        coordinator: args.coordinator,
        control_port: args.control_port,
    })
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
}

/// Rank 0 serves gRPC with the hostfile as its default; the others follow rank 0.
pub fn run_rank(args: RankOptions) -> Result<(), Box<dyn std::error::Error>> {
    let hostfile = super::hostfile_for_rank(&args.hostfile, &args.backend, args.rank)?;
    if args.rank == 0 {
        // LoadModel without a hostfile option uses these (the env fallbacks).
        std::env::set_var("MLX_DISTRIBUTED_HOSTFILE", &args.hostfile);
        std::env::set_var("MLX_DISTRIBUTED_BACKEND", &args.backend);
        if let Some(port) = args.control_port {
            std::env::set_var("MLX_DISTRIBUTED_CONTROL_PORT", port.to_string());
        }
        if let Some(c) = &args.coordinator {
            std::env::set_var("MLX_JACCL_COORDINATOR", c);
        }
        return backend::server::run(&args.addr);
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
    })?;
    Ok(())
}
