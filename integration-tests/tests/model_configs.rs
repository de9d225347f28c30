//! Every example in `model-configs/` is one LocalAI would accept and we would load: it parses
//! with the real model-YAML parser, maps to a LoadModel request through the real mapping, its
//! options parse, and the hostfile it names (kept in `model-configs/hosts/`) is valid. The
//! demo loads the 2-rank pipeline's YAML over two loopback ranks, as `scripts/demo` does.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use backend::distributed::Hostfile;
use backend::model_yaml::ModelYaml;
use backend::options::{Env, LoadConfig};
use integration_tests::cluster::TempDir;
use integration_tests::server::workspace_binary;
use integration_tests::{fixture, wait_bounded, TestResult};

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
        if let Some(hostfile) = &config.cluster.hostfile {
            let file = hostfile.file_name().ok_or("a hostfile path")?;
            let local = dir.join("hosts").join(file);
            let h = Hostfile::read(&local, config.cluster.transport)
                .map_err(|e| format!("{name}: {e}"))?;
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

/// The demo's happy path, off a terminal: the answer, no warning, and no colour codes in its
/// output or in the ranks' log (kept in the temp dir it is given).
#[test]
fn the_demo_loads_the_pipeline_yaml_over_two_ranks() -> TestResult {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model-configs");
    let tmp = TempDir::new("demo")?;
    let child = Command::new(workspace_binary("worker")?)
        .args(["demo", "--ranks", "2", "--max-tokens", "8", "--config"])
        .arg(dir.join("smollm2-pipeline-2.yaml"))
        .arg("--model")
        .arg(fixture("smollm2-135m-8bit")?)
        .env_remove("MLX_DISTRIBUTED_TOKEN")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .env("TMPDIR", &tmp.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = wait_bounded(child, Duration::from_secs(120))?;
    let (text, log) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{text}\n{log}");
    assert!(log.contains("smollm2-pipeline-2.yaml says"), "{log}");
    assert!(text.contains("Paris"), "{text}");
    assert!(!log.contains("WARN"), "a warning on the happy path: {log}");
    let ranks = std::fs::read_to_string(tmp.0.join("mlx-distributed-demo.log"))?;
    assert!(ranks.contains("serving"), "{ranks}");
    for (what, out) in [
        ("stdout", &*text),
        ("stderr", &*log),
        ("the ranks' log", &*ranks),
    ] {
        assert!(!out.contains('\x1b'), "colour codes in {what}: {out:?}");
    }
    Ok(())
}
