//! `--config model.yaml`: the cluster and model a LocalAI model YAML names, read the way
//! LoadModel reads it (`backend::model_yaml`'s parser and mapping, then the load options' own
//! checks), so that the same file copied to every machine starts every rank. A flag, or the
//! environment variable standing for it, wins over the YAML.

use std::path::{Path, PathBuf};

use backend::distributed::Transport;
use backend::model_yaml::ModelYaml;
use backend::options::{Env, LoadConfig, LoadRequest};

use super::CliResult;

/// What the YAML says; `None` where it says nothing (or there is no YAML).
#[derive(Default)]
pub struct FromYaml {
    pub hostfile: Option<PathBuf>,
    /// `ring` or `jaccl`, where the options name one.
    pub backend: Option<String>,
    pub coordinator: Option<String>,
    pub control_port: Option<u16>,
    pub model: Option<String>,
    /// `ship_model:true`: rank 0 ships the workers their shares.
    pub ship_model: bool,
    /// The LoadModel request a host would send for the YAML.
    pub request: Option<LoadRequest>,
    /// Keys a host sends with each request instead (`ModelYaml::request_time_keys`).
    pub per_request: Vec<&'static str>,
}

impl FromYaml {
    /// What rank 0 loads before serving: the YAML's request, its `hostfile:` option pointed
    /// at the hostfile this rank runs with (a flag's).
    pub fn preload(&self, hostfile: &Path) -> Option<LoadRequest> {
        let mut req = self.load()?;
        let here = format!("hostfile:{}", hostfile.display());
        for option in req
            .options
            .iter_mut()
            .filter(|o| o.starts_with("hostfile:"))
        {
            *option = here.clone();
        }
        Some(req)
    }

    /// What a P2P rank 0 loads before serving: the YAML's request without a `hostfile:`
    /// option (its workers are the ones it finds).
    pub fn without_hostfile(&self) -> Option<LoadRequest> {
        let mut req = self.load()?;
        if req.options.iter().any(|o| o.starts_with("hostfile:")) {
            tracing::warn!("the YAML's hostfile is not used: P2P finds the workers");
        }
        req.options.retain(|o| !o.starts_with("hostfile:"));
        Some(req)
    }

    /// The YAML's LoadModel request for a rank that loads it itself. Its request-time keys
    /// (sampling, the template flag) are the host's to send with each request, as LocalAI
    /// does: nothing is wrong, so the debug log alone says they are not applied here.
    pub fn load(&self) -> Option<LoadRequest> {
        if !self.per_request.is_empty() {
            tracing::debug!(
                keys = self.per_request.join(", "),
                "request-time keys: a host sends these with each request, so loading does \
                 not apply them"
            );
        }
        self.request.clone()
    }
}

/// The YAML alone: no variable stands in for what it does not say (flags and variables are
/// weighed by the caller, and win).
struct YamlOnly;

impl Env for YamlOnly {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

/// The YAML at `path`, checked as LoadModel checks it; nothing when no `--config` was given.
pub fn read(path: Option<&Path>) -> CliResult<FromYaml> {
    read_in(path, None)
}

/// As [`read`], with LocalAI's models folder, where a relative model is looked for.
pub fn read_in(path: Option<&Path>, model_path: Option<&Path>) -> CliResult<FromYaml> {
    let Some(path) = path else {
        return Ok(FromYaml::default());
    };
    let named = |e: String| format!("--config {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| named(e.to_string()))?;
    let yaml = ModelYaml::parse(&text).map_err(named)?;
    let models = model_path.map_or(String::new(), |p| p.display().to_string());
    let request = yaml.load_request(&models);
    let config = LoadConfig::from_request(&request, &YamlOnly).map_err(named)?;
    let names_backend = backend::options::parse_options(&yaml.options)
        .iter()
        .any(|(key, _)| key == "distributed_backend");
    let backend = match config.cluster.transport {
        Transport::Jaccl => "jaccl",
        Transport::Ring | Transport::Any => "ring",
    };
    Ok(FromYaml {
        hostfile: config.cluster.hostfile,
        backend: names_backend.then(|| backend.to_string()),
        coordinator: config.cluster.coordinator,
        control_port: config.cluster.control_port,
        model: Some(request.model.clone()).filter(|m| !m.is_empty()),
        ship_model: config.shipping.ship_model,
        request: Some(request),
        per_request: yaml.request_time_keys(),
    })
}

/// The flag's value, else the YAML's, else an error saying where it may come from.
pub fn required<T>(flag: Option<T>, yaml: Option<T>, what: &str) -> CliResult<T> {
    flag.or(yaml).ok_or_else(|| {
        format!("{what} is required: give it, or a --config whose options name it").into()
    })
}
