//! `worker`: runs ranks of a distributed model, and local tools around it.

mod args;
mod commands;

use clap::FromArgMatches;

fn main() -> std::process::ExitCode {
    let cli =
        args::Cli::from_arg_matches(&args::command().get_matches()).unwrap_or_else(|e| e.exit());
    // A rank is a long-running service whose log says what it does; the tools stay quiet.
    let default = match cli.command {
        args::Command::MlxDistributed(_)
        | args::Command::P2pMlx(_)
        | args::Command::Serve(_)
        | args::Command::Launch(_) => "info",
        _ => "warn",
    };
    backend::progress::init_log(default);
    let code = match commands::run(cli.command) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    };
    // MLX must be idle before `exit` runs its destructors.
    backend::lifecycle::end_process(code)
}
