//! Every example in `model-configs/` is one LocalAI would accept and we would load: its
//! options parse, and the hostfile it names (kept in `model-configs/hosts/`) is valid.

use std::path::Path;

use backend::distributed::Hostfile;
use backend::options::{Env, LoadConfig, LoadRequest};
use integration_tests::TestResult;

struct NoEnv;

impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

/// The YAML's `options:` entries and `parameters.model`, read line by line (our files only).
fn request_of(yaml: &str) -> LoadRequest {
    let mut req = LoadRequest::default();
    let mut in_options = false;
    for line in yaml.lines() {
        let trimmed = line.trim();
        if let Some(model) = trimmed.strip_prefix("model:") {
            req.model = model.trim().to_string();
        }
        if !line.starts_with(' ') {
            in_options = trimmed == "options:";
            continue;
        }
        if let (true, Some(entry)) = (in_options, trimmed.strip_prefix("- ")) {
            let entry = entry.split(" #").next().unwrap_or_default().trim();
            req.options.push(entry.trim_matches('"').to_string());
        }
    }
    req
}

#[test]
fn every_example_config_loads_and_names_a_valid_hostfile() -> TestResult {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model-configs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let yaml = std::fs::read_to_string(&path)?;
        let name = path.display();
        assert!(yaml.contains("backend: mlx-distributed"), "{name}");
        let config = LoadConfig::from_request(&request_of(&yaml), &NoEnv)
            .map_err(|e| format!("{name}: {e}"))?;
        if let Some(hostfile) = &config.hostfile {
            let file = hostfile.file_name().ok_or("a hostfile path")?;
            let local = dir.join("hosts").join(file);
            let h = Hostfile::read(&local, config.transport).map_err(|e| format!("{name}: {e}"))?;
            assert!(h.size() > 1, "{name}: a cluster of one");
        }
        seen += 1;
    }
    assert!(
        seen >= 4,
        "single node, 2-rank pipeline, 3-rank tensor and JACCL"
    );
    Ok(())
}
