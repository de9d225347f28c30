//! Portable kernels: the reference every vector kernel is tested against, and the path for
//! the formats no vector kernel covers yet.

use super::{code, Operands, Out};

/// Lanes the vector kernels accumulate in; the portable kernel keeps the same order, so a
/// format moving from it to a vector kernel keeps its numerics.
pub(super) const LANES: usize = 8;

/// Columns `cols` of `out[m, n]` as the vector kernels compute them: per lane
/// `fma(x, fma(s, q, b), acc)`, lanes summed pairwise at the end.
///
/// # Safety
/// As `kernel::columns`.
pub(super) unsafe fn matmul(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    for n in cols {
        let row = ops.w_row(n);
        let (scales, biases) = ops.groups(n);
        for m in 0..ops.m {
            let x = &ops.x[m * ops.k..(m + 1) * ops.k];
            let mut acc = [0f32; LANES];
            for k in 0..ops.k {
                let g = k / ops.format.group;
                let q = code(row, k, ops.format.bits) as f32;
                let w = scales[g].mul_add(q, biases[g]);
                acc[k % LANES] = x[k].mul_add(w, acc[k % LANES]);
            }
            out.write(m, n, ops.n, sum_lanes(acc));
        }
    }
}

/// The lanes summed in the order the vector kernels reduce them.
pub(super) fn sum_lanes(a: [f32; LANES]) -> f32 {
    let quad = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let pair = [quad[0] + quad[2], quad[1] + quad[3]];
    pair[0] + pair[1]
}

/// The exact product in f64, element by element: what tests measure every kernel against.
pub fn reference(ops: &Operands) -> Vec<f64> {
    let mut out = vec![0f64; ops.m * ops.n];
    for n in 0..ops.n {
        let row = ops.w_row(n);
        let (scales, biases) = ops.groups(n);
        for m in 0..ops.m {
            let x = &ops.x[m * ops.k..(m + 1) * ops.k];
            out[m * ops.n + n] = (0..ops.k)
                .map(|k| {
                    let g = k / ops.format.group;
                    let w =
                        scales[g] as f64 * code(row, k, ops.format.bits) as f64 + biases[g] as f64;
                    x[k] as f64 * w
                })
                .sum();
        }
    }
    out
}
