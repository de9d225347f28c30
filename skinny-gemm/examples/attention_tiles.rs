//! Decode attention's two products through `cblas_sgemm` (skinny-gemm's kernel), on a decode
//! step's shapes: per kv head of every layer, `q K^T` (M query rows by the cached keys) then
//! `p V`, each head's keys and values in its own buffer, so that the step reads them from the
//! caches or memory as a model's does. The best of several steps, as multiply-adds a ns.
//!
//!   MLX_DISTRIBUTED_GEMM_THREADS=1 cargo run --release -p skinny-gemm --example attention_tiles
//!   LEN=500 HEADS=90 DIM=64 ROWS=1,3,9,15 ...   (the default: SmolLM2-135M's 30 layers of 3 kv
//!   heads at 500 positions; ROWS = query rows a kv head: 3 query heads times the positions)

use std::time::Instant;

use skinny_gemm::cblas::{cblas_sgemm, NO_TRANS, ROW_MAJOR, TRANS};

fn var(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The fastest of `reps` runs of `step`, in seconds.
fn fastest(reps: usize, mut step: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            step();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    if !skinny_gemm::active() {
        println!("skinny-gemm's kernel is not active here (it needs x86-64 Linux, AVX2 and FMA)");
        return;
    }
    let (len, heads, d) = (var("LEN", 500), var("HEADS", 90), var("DIM", 64));
    let rows: Vec<usize> = std::env::var("ROWS")
        .unwrap_or("1,3,9,15".into())
        .split(',')
        .filter_map(|r| r.parse().ok())
        .collect();
    // Each head's keys, then its values.
    let cache: Vec<Vec<f32>> = (0..heads)
        .map(|h| {
            (0..2 * len * d)
                .map(|i| ((i * 31 + h) % 97) as f32 / 97.0 - 0.5)
                .collect()
        })
        .collect();
    for m in rows {
        let q = vec![0.01f32; m * d];
        let (mut scores, mut out) = (vec![0f32; m * len], vec![0f32; m * d]);
        let (m, n, k) = (m as i32, len as i32, d as i32);
        // SAFETY: every pointer covers the matrix its sizes describe.
        let qk = fastest(5, || unsafe {
            for c in &cache {
                cblas_sgemm(
                    ROW_MAJOR,
                    NO_TRANS,
                    TRANS,
                    m,
                    n,
                    k,
                    1.0,
                    q.as_ptr(),
                    k,
                    c.as_ptr(),
                    k,
                    0.0,
                    scores.as_mut_ptr(),
                    n,
                );
            }
        });
        let pv = fastest(5, || unsafe {
            for c in &cache {
                cblas_sgemm(
                    ROW_MAJOR,
                    NO_TRANS,
                    NO_TRANS,
                    m,
                    k,
                    n,
                    1.0,
                    scores.as_ptr(),
                    n,
                    c[len * d..].as_ptr(),
                    k,
                    0.0,
                    out.as_mut_ptr(),
                    k,
                );
            }
        });
        let macs = (heads * len * d) as f64 * m as f64;
        println!(
            "{m} rows: q K^T {:.3} ms ({:.1} MAC/ns), p V {:.3} ms ({:.1} MAC/ns)",
            qk * 1e3,
            macs / qk / 1e9,
            pv * 1e3,
            macs / pv / 1e9
        );
    }
}
