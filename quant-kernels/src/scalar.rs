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
    let (bits, mode, group) = (ops.format.bits, ops.format.mode, ops.format.group);
    let order = layout::order(bits);
    // A block is a group, or a step of two 16-code groups (`nvfp4`).
    let block = group.max(STEP);
    let (steps, blocks, groups) = (block / STEP, ops.k / block, ops.k / group);
    let mut sums = Vec::new();
    group_sums(ops, &mut sums);
    for n in cols {
        let row = ops.w_row(n);
        let (scales, biases) = ops.groups(n);
        let biases: Option<Vec<f32>> = biases.map(|b| (0..groups).map(|g| b.get(g)).collect());
        for m in 0..ops.m {
            let x = &ops.x[m * ops.k..(m + 1) * ops.k];
            let mut acc = [[0f32; LANES]; VECTORS];
            for b in 0..blocks {
                let mut p = [0f32; STEP];
                for step in b * steps..(b + 1) * steps {
                    for (i, &c) in order.iter().enumerate() {
                        let q = mode.code_value(code(row, step * STEP + c, bits), bits);
                        p[i] = q.mul_add(x[step * STEP + i], p[i]);
                    }
                }
                for (i, p) in p.iter().enumerate() {
                    let g = (b * block + order[i]) / group;
                    let lane = &mut acc[i / LANES][i % LANES];
                    *lane = scales.get(g).mul_add(*p, *lane);
                }
            }
            let v = reduce(acc);
            let v = match &biases {
                Some(b) => v + bias_term(b, &sums[m * groups..(m + 1) * groups]),
                None => v,
            };
            out.write(m, n, ops.n, v);
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

/// Weight row `n` as f32 in natural order, for the panels: `fma(s, q, b)` per code, or (float
/// modes) `value(q) · s`, MLX's dequantized weight.
pub(super) fn dequantize_row(ops: &Operands, n: usize, dst: &mut [f32]) {
    let row = ops.w_row(n);
    let (scales, biases) = ops.groups(n);
    let (bits, mode) = (ops.format.bits, ops.format.mode);
    for (k, w) in dst.iter_mut().enumerate() {
        let g = k / ops.format.group;
        let q = mode.code_value(code(row, k, bits), bits);
        *w = match biases {
            Some(b) => scales.get(g).mul_add(q, b.get(g)),
            None => q * scales.get(g),
        };
    }
}

/// The exact product in f64, element by element: what tests measure every kernel against.
pub fn reference(ops: &Operands) -> Vec<f64> {
    let mut out = vec![0f64; ops.m * ops.n];
    let (bits, mode) = (ops.format.bits, ops.format.mode);
    for n in 0..ops.n {
        let row = ops.w_row(n);
        let (scales, biases) = ops.groups(n);
        for m in 0..ops.m {
            let x = &ops.x[m * ops.k..(m + 1) * ops.k];
            out[m * ops.n + n] = (0..ops.k)
                .map(|k| {
                    let g = k / ops.format.group;
                    let q = mode.code_value(code(row, k, bits), bits) as f64;
                    let b = biases.map_or(0.0, |b| b.get(g) as f64);
                    x[k] as f64 * (scales.get(g) as f64 * q + b)
                })
                .sum();
        }
    }
    out
}
