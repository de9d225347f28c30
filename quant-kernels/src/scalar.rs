//! Portable kernels: the reference every vector kernel is tested against, and the floor on
//! machines without one.

use super::layout::{self, LANES, STEP, VECTORS};
use super::{bias_term, code, group_sums, Operands, Out};

/// Columns `cols` of `out[m, n]` as the vector kernels compute them (the module
/// documentation of `kernel` gives the order), x in lane order ([`layout::permute`]).
///
/// # Safety
/// As `kernel::columns`.
pub(super) unsafe fn matmul(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    let order = layout::order(ops.format.bits);
    let (steps, groups) = (ops.format.group / STEP, ops.k / ops.format.group);
    let mut sums = Vec::new();
    group_sums(ops, &mut sums);
    for n in cols {
        let row = ops.w_row(n);
        let (scales, biases) = ops.groups(n);
        let biases: Vec<f32> = (0..groups).map(|g| biases.get(g)).collect();
        for m in 0..ops.m {
            let x = &ops.x[m * ops.k..(m + 1) * ops.k];
            let mut acc = [[0f32; LANES]; VECTORS];
            for g in 0..groups {
                let mut p = [0f32; STEP];
                for step in g * steps..(g + 1) * steps {
                    for (i, &c) in order.iter().enumerate() {
                        let q = code(row, step * STEP + c, ops.format.bits) as f32;
                        p[i] = q.mul_add(x[step * STEP + i], p[i]);
                    }
                }
                for (i, p) in p.iter().enumerate() {
                    let lane = &mut acc[i / LANES][i % LANES];
                    *lane = scales.get(g).mul_add(*p, *lane);
                }
            }
            let bias = bias_term(&biases, &sums[m * groups..(m + 1) * groups]);
            out.write(m, n, ops.n, reduce(acc) + bias);
        }
    }
}

/// The accumulators summed in the order the vector kernels reduce them: vectors pairwise,
/// then lanes pairwise.
pub(super) fn reduce(acc: [[f32; LANES]; VECTORS]) -> f32 {
    let a: [f32; LANES] =
        std::array::from_fn(|l| (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]));
    let quad = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let pair = [quad[0] + quad[2], quad[1] + quad[3]];
    pair[0] + pair[1]
}

/// Weight row `n` as f32 in natural order: `fma(s, q, b)` per code, for the panels.
pub(super) fn dequantize_row(ops: &Operands, n: usize, dst: &mut [f32]) {
    let row = ops.w_row(n);
    let (scales, biases) = ops.groups(n);
    for (k, w) in dst.iter_mut().enumerate() {
        let g = k / ops.format.group;
        *w = scales
            .get(g)
            .mul_add(code(row, k, ops.format.bits) as f32, biases.get(g));
    }
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
                    let w = scales.get(g) as f64 * code(row, k, ops.format.bits) as f64
                        + biases.get(g) as f64;
                    x[k] as f64 * w
                })
                .sum();
        }
    }
    out
}
