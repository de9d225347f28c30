//! `worker serve --config model.yaml`: rank 0 for users without a host. The same as an
//! external backend followed by the LoadModel a host would send for the YAML (the one
//! mapping, `ModelYaml::load_request`, checked as `--config` checks it everywhere), loaded
//! before serving starts.

use backend::options::Settings;
use backend::server::ServerOptions;

use super::CliResult;
use crate::args::ServeArgs;

pub fn run(args: ServeArgs) -> CliResult {
    let yaml = super::config::read_in(Some(&args.config), args.model_path.as_deref())?;
    backend::server::run(ServerOptions {
        addr: args.addr,
        settings: Settings::default(),
        preload: yaml.load(),
    })
}
