//! mlx-lm, the oracle and the speed bar, run from the fixture venv as a bounded child process.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{cache_dir, wait_bounded, TestResult};

/// Our binaries link OpenBLAS ahead of MLX's reference BLAS; mlx-lm gets the same.
pub const OPENBLAS: &str = "/usr/lib/x86_64-linux-gnu/libblas.so.3";

/// The venv's `bin` folder (python, mlx.launch, mlx_lm.server).
pub fn venv_bin() -> PathBuf {
    cache_dir().join("venv/bin")
}

/// One of our `scripts/bench` scripts.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts/bench")
        .join(name)
}

/// Runs `cmd` with our BLAS, within `limit`, and parses the last JSON line it prints.
pub fn json_output(mut cmd: Command, limit: Duration) -> TestResult<serde_json::Value> {
    if Path::new(OPENBLAS).exists() {
        cmd.env("LD_PRELOAD", OPENBLAS);
    }
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let out = wait_bounded(child, limit)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = stdout.lines().rev().find(|l| l.starts_with('{'));
    let Some(json) = json.filter(|_| out.status.success()) else {
        return Err(format!("mlx-lm failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    };
    Ok(serde_json::from_str(json)?)
}
