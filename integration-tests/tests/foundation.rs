//! The foundation: MLX from Rust, the quantized fixture through mlx-rs, and a real ring all_sum.

use std::process::{Command, Stdio};
use std::time::Duration;

use backend::distributed::{Group, Transport};
use integration_tests::{fixture, free_port, wait_bounded, TestResult};
use mlx_rs::{Array, Dtype};

#[test]
fn quantized_fixture_loads_through_mlx_rs() -> TestResult {
    let dir = fixture("smollm2-135m-4bit")?;
    let tensors = Array::load_safetensors(dir.join("model.safetensors"))?;
    let get = |key: &str| tensors.get(key).ok_or_else(|| format!("missing key {key}"));
    // 4-bit packs 8 values per uint32; group size 64 gives one scale and bias per 64 inputs.
    for (key, rows) in [
        ("model.layers.0.self_attn.q_proj", 576),
        ("model.layers.0.self_attn.k_proj", 192),
    ] {
        let weight = get(&format!("{key}.weight"))?;
        assert_eq!(weight.shape(), &[rows, 576 / 8]);
        assert_eq!(weight.dtype(), Dtype::Uint32);
        for part in ["scales", "biases"] {
            let a = get(&format!("{key}.{part}"))?;
            assert_eq!(a.shape(), &[rows, 576 / 64], "{key}.{part}");
            assert_eq!(a.dtype(), Dtype::Bfloat16, "{key}.{part}");
        }
    }
    assert_eq!(
        get("model.layers.0.mlp.down_proj.weight")?.shape(),
        &[576, 1536 / 8]
    );
    assert_eq!(get("model.embed_tokens.weight")?.shape(), &[49152, 576 / 8]);
    assert_eq!(get("model.norm.weight")?.dtype(), Dtype::Bfloat16);
    Ok(())
}

/// Each child runs this same test binary filtered to this test, with its rank in the environment.
#[test]
fn ring_all_sum_across_two_processes() -> TestResult {
    if let Ok(rank) = std::env::var("MLXD_TEST_RANK") {
        return ring_child(&rank);
    }
    assert!(
        Group::is_available(Transport::Ring),
        "this MLX has no ring backend"
    );
    let dir = std::env::temp_dir().join(format!("mlxd-ring-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let hostfile = dir.join("hostfile.json");
    let (p0, p1) = (free_port()?, free_port()?);
    std::fs::write(
        &hostfile,
        format!(r#"[["127.0.0.1:{p0}"],["127.0.0.1:{p1}"]]"#),
    )?;
    let children = (0..2)
        .map(|rank| {
            Command::new(std::env::current_exe()?)
                .args([
                    "--exact",
                    "ring_all_sum_across_two_processes",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("MLXD_TEST_RANK", rank.to_string())
                .env("MLX_RANK", rank.to_string())
                .env("MLX_HOSTFILE", &hostfile)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (rank, child) in children.into_iter().enumerate() {
        let out = wait_bounded(child, Duration::from_secs(60))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "rank {rank} failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("all_sum=[3.0, 30.0]"),
            "rank {rank} printed: {stdout}"
        );
    }
    std::fs::remove_dir_all(dir)?;
    Ok(())
}

fn ring_child(rank: &str) -> TestResult {
    let group = Group::init(Transport::Ring, true)?;
    assert_eq!(group.size(), 2);
    assert_eq!(group.rank().to_string(), rank);
    let r = group.rank() as f32 + 1.0;
    let summed = group.all_sum(&Array::from_slice(&[r, 10.0 * r], &[2]))?;
    summed.eval()?;
    println!("all_sum={:?}", summed.as_slice::<f32>());
    Ok(())
}
