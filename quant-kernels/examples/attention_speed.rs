//! The int8 numerics' causal attention (`quant_kernels::attention`) on a prefill's shapes, per
//! vector set: the fastest of several calls, as multiply-adds a nanosecond (the scores' and
//! the values', over only the keys each query sees).
//!
//!   MLX_DISTRIBUTED_GEMM_THREADS=1 cargo run --release -p quant-kernels --example attention_speed
//!   LEN=512 HEADS=9 KV_HEADS=3 DIM=64 ...   (the default: SmolLM2-135M at 1,024 positions)

use quant_kernels::attention::{attend_causal_with, Set, Side};
use std::time::Instant;

fn var(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (len, heads, kv_heads, d) = (
        var("LEN", 1024),
        var("HEADS", 9),
        var("KV_HEADS", 3),
        var("DIM", 64),
    );
    let value = |i: usize| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5;
    let q: Vec<f32> = (0..heads * len * d).map(|i| value(i) * 0.125).collect();
    let kv: Vec<f32> = (0..kv_heads * len * d).map(|i| value(i + 17)).collect();
    let side = Side {
        data: &kv,
        heads: kv_heads,
        len,
        width: d,
        head_stride: len * d,
        row_stride: d,
    };
    let mut out = vec![0.0f32; heads * len * d];
    let macs = (heads * len * (len + 1) / 2 * 2 * d) as f64;
    for set in Set::available() {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            attend_causal_with(set, &q, heads, side, side, &mut out);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{set:?}: {len} positions, {heads}/{kv_heads} heads of {d}: {:.2} ms, {:.1} multiply-adds a ns",
            best * 1e3,
            macs / best / 1e9
        );
    }
}
