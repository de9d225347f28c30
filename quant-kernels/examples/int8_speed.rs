//! The integer kernels against the f32 ones on one row of x (a decode step), per shape:
//! the fastest of many single calls each, alternating, so that a busy machine disturbs the
//! comparison less.
//!
//!   MLX_DISTRIBUTED_GEMM_THREADS=1 cargo run --release -p quant-kernels --example int8_speed
//!   SHAPES=576x1536,2048x8192 ...   (k x n; the default is SmolLM2-135M's and a 1.6 B model's)
//!   ROWS=128 ...   (rows of x: a prefill's, where the f32 side takes the dequantized panels)

use quant_kernels::{int8, Format, FormatError, Operands, Params};
use std::time::Instant;

const DEFAULT: [(usize, usize); 5] = [
    (576, 1536),
    (1536, 576),
    (576, 576),
    (2048, 8192),
    (8192, 2048),
];

fn shapes() -> Vec<(usize, usize)> {
    let given = std::env::var("SHAPES").unwrap_or_default();
    let parsed: Option<Vec<(usize, usize)>> = given
        .split(',')
        .map(|s| {
            let (k, n) = s.split_once('x')?;
            Some((k.parse().ok()?, n.parse().ok()?))
        })
        .collect();
    parsed.unwrap_or(DEFAULT.to_vec())
}

/// The f32 product `matmul` picks (the panels beyond 16 rows) where the example links a BLAS
/// (x86-64 Linux); elsewhere the few-row kernels.
fn f32_product(ops: &Operands, out: &mut [f32]) {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    quant_kernels::matmul(ops, out);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    quant_kernels::rows(ops, out);
}

/// The fastest of `reps` calls of the f32 kernel and of the integer one, in seconds.
fn time(ops: &Operands, reps: usize) -> (f64, f64) {
    let mut out = vec![0f32; ops.m * ops.n];
    let (mut f32_best, mut int8_best) = (f64::MAX, f64::MAX);
    for _ in 0..reps {
        let t = Instant::now();
        f32_product(ops, &mut out);
        f32_best = f32_best.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        int8::rows(ops, &mut out);
        int8_best = int8_best.min(t.elapsed().as_secs_f64());
    }
    (f32_best, int8_best)
}

fn main() -> Result<(), FormatError> {
    for bits in [4u32, 8] {
        for (k, n) in shapes() {
            let format = Format::new(bits, 64)?;
            let w: Vec<u8> = (0..n * format.row_bytes(k))
                .map(|i| ((i * 2_654_435_761) >> 13) as u8)
                .collect();
            let scale = |i: usize| half::bf16::from_f32(0.01 + (i % 7) as f32 * 1e-3).to_bits();
            let s: Vec<u16> = (0..n * k / 64).map(scale).collect();
            let m: usize = std::env::var("ROWS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let ops = Operands {
                x: &x,
                m,
                k,
                w: &w,
                scales: Params::Bf16(&s),
                biases: Some(Params::Bf16(&s)),
                n,
                format,
            };
            let (f, i) = time(&ops, (400_000_000 / (m * n * k)).max(10));
            let gb = (w.len() + s.len() * 4) as f64 / 1e9;
            println!(
                "{bits}-bit k={k} n={n}: f32 {:.1} us ({:.1} GB/s), int8 [{}] {:.1} us ({:.1} GB/s): {:.2}x",
                f * 1e6,
                gb / f,
                int8::isa().name(),
                i * 1e6,
                gb / i,
                f / i
            );
        }
    }
    Ok(())
}
