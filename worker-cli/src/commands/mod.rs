mod bench_link;
mod check;
mod config;
mod demo;
mod distributed;
mod generate;
mod launch;
mod p2p;
mod serve;

use crate::args::Command;

pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The transport a `--backend` value names (clap allows only ring and jaccl).
pub fn transport(backend: &str) -> backend::distributed::Transport {
    match backend {
        "jaccl" => backend::distributed::Transport::Jaccl,
        _ => backend::distributed::Transport::Ring,
    }
}

/// The hostfile for `backend`, with `rank` checked to be one of its ranks.
pub fn hostfile_for_rank(
    path: &std::path::Path,
    backend: &str,
    rank: usize,
) -> CliResult<backend::distributed::Hostfile> {
    let hostfile = backend::distributed::Hostfile::read(path, transport(backend))?;
    hostfile
        .check_rank(rank)
        .map_err(|e| format!("--rank: {e}"))?;
    Ok(hostfile)
}

pub fn run(command: Command) -> CliResult {
    match command {
        Command::Generate(args) => generate::run(args),
        Command::MlxDistributed(args) => distributed::run(args),
        Command::Demo(args) => demo::run(args),
        Command::BenchLink(args) => bench_link::run(args),
        Command::Check(args) => check::run(args),
        Command::P2pMlx(args) => p2p::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Launch(args) => launch::run(args),
    }
}
