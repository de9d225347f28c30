mod bench;
mod bench_link;
mod check;
mod demo;
mod distributed;
mod generate;
mod p2p;

use crate::args::Command;

pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

pub fn run(command: Command) -> CliResult {
    match command {
        Command::Generate(args) => generate::run(args),
        Command::Bench(args) => bench::run(args),
        Command::MlxDistributed(args) => distributed::run(args),
        Command::Demo(args) => demo::run(args),
        Command::BenchLink(args) => bench_link::run(args),
        Command::Check(args) => check::run(args),
        Command::P2pMlx(args) => p2p::run(args),
    }
}
