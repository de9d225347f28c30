//! Every example in `model-configs/` is one LocalAI would accept and we would load: it parses
//! with the real model-YAML parser, maps to a LoadModel request through the real mapping, its
//! options parse, and the hostfile it names (kept in `model-configs/hosts/`) is valid.

use std::path::Path;

use backend::distributed::Hostfile;
use backend::model_yaml::ModelYaml;
use backend::options::{Env, LoadConfig};
use integration_tests::TestResult;

struct NoEnv;

impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
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
        let name = path.display();
        let yaml = ModelYaml::parse(&std::fs::read_to_string(&path)?)
            .map_err(|e| format!("{name}: {e}"))?;
        assert_eq!(yaml.backend, "mlx-distributed", "{name}");
        assert!(!yaml.parameters.model.is_empty(), "{name}");
        let config = LoadConfig::from_request(&yaml.load_request(""), &NoEnv)
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
