//! The portable integer kernel: the reference every vector set equals bit for bit, and what
//! runs where a format has no vector kernel.

use super::{block_scale, digits, each_row, group_shift, reduce, with_affine_params};
use super::{Activations, Row};
use super::{ACCUMULATORS, BLOCK, LANES, PER_LANE};
use crate::layout;
use crate::{code, Operands, Out, Stored};

/// Columns `cols` of `out[m, n]`, in the module's order.
///
/// # Safety
/// `out` points to m * n floats, and no other thread writes these columns.
pub(super) unsafe fn matmul(
    ops: &Operands,
    acts: &Activations,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    let (bits, shift) = (ops.format.bits, group_shift(ops.format));
    let order = layout::order(bits);
    with_affine_params!(ops, |scales, biases| each_row(
        (ops, acts, cols, out),
        (scales, biases),
        |w, x, s| row(w, x, s, (bits, shift, &order))
    ))
}

/// One weight row (packed) against one int8 row of x, without the bias part.
fn row<P: Stored>(
    w: &[u8],
    x: Row,
    scales: &[P],
    (bits, shift, order): (u32, u32, &[usize]),
) -> f32 {
    let mut acc = [[0f32; LANES]; ACCUMULATORS];
    for b in 0..x.scales.len() {
        let at = |codes: &[i8]| lane_sums(w, &codes[b * BLOCK..], b, (bits, order));
        let (hi, lo) = (at(x.hi), at(x.lo));
        let lanes: [i32; LANES] = std::array::from_fn(|l| digits(hi[l], lo[l]));
        let c = block_scale(scales, shift, &x, b);
        for (a, p) in acc[b % ACCUMULATORS].iter_mut().zip(lanes) {
            *a = c.mul_add(p as f32, *a);
        }
    }
    reduce(acc)
}

/// Block `b`'s lanes for one digit: each the exact sum of 4 code-times-digit products.
fn lane_sums(w: &[u8], x: &[i8], b: usize, (bits, order): (u32, &[usize])) -> [i32; LANES] {
    std::array::from_fn(|l| {
        (l * PER_LANE..(l + 1) * PER_LANE)
            .map(|i| code(w, b * BLOCK + order[i], bits) as i32 * i32::from(x[i]))
            .sum()
    })
}

/// The integer path's product in f64, element by element: each block's dequantized x
/// (`u · (128 · hi + lo)`) times the weight (`s·q + b`), the bias part on the exact group sums
/// of x as the kernels take it. What tests measure the kernels' float steps against.
pub fn reference(ops: &Operands, acts: &Activations) -> Vec<f64> {
    let (bits, group) = (ops.format.bits, ops.format.group);
    let order = layout::order(bits);
    let groups = ops.k / group;
    let mut out = vec![0f64; ops.m * ops.n];
    with_affine_params!(ops, |scales, biases| {
        for n in 0..ops.n {
            let w = ops.w_row(n);
            for m in 0..ops.m {
                let x = acts.row(m);
                let weights = (0..ops.k).map(|i| {
                    let (b, k) = (i / BLOCK, (i / BLOCK) * BLOCK + order[i % BLOCK]);
                    let s = scales[n * groups + k / group].widen() as f64;
                    let v = f64::from(digits(i32::from(x.hi[i]), i32::from(x.lo[i])));
                    x.scales[b] as f64 * v * s * code(w, k, bits) as f64
                });
                let bias = (0..groups).map(|g| {
                    biases[n * groups + g].widen() as f64 * acts.sums[m * groups + g] as f64
                });
                out[m * ops.n + n] = weights.sum::<f64>() + bias.sum::<f64>();
            }
        }
    });
    out
}
