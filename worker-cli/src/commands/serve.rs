//! `worker serve --config model.yaml`: rank 0 for users without a host. The same as an
//! external backend followed by the LoadModel a host would send for the YAML (the one
//! mapping, `ModelYaml::load_request`), loaded before serving starts.

use backend::model_yaml::ModelYaml;
use backend::options::Settings;
use backend::server::ServerOptions;

use super::CliResult;
use crate::args::ServeArgs;

pub fn run(args: ServeArgs) -> CliResult {
    let named = |e: String| format!("--config {}: {e}", args.config.display());
    let text = std::fs::read_to_string(&args.config).map_err(|e| named(e.to_string()))?;
    let yaml = ModelYaml::parse(&text).map_err(named)?;
    let model_path = args
        .model_path
        .as_ref()
        .map_or(String::new(), |p| p.display().to_string());
    backend::server::run(ServerOptions {
        addr: args.addr,
        settings: Settings::default(),
        preload: Some(yaml.load_request(&model_path)),
    })
}
