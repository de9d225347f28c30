//! The portable integer kernel: the reference every vector set equals bit for bit, and what
//! runs where a format has no vector kernel.

use super::{block_scale, digits, each_row, fold, fp4, group_shift, reduce, Activations, Row};
use super::{Totals, ACCUMULATORS, BLOCK, E2M1_TWICE, LANES, PER_LANE};
use crate::vector::by_stored;
use crate::{code, layout, Operands, Out, Stored};

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
    let kind = Codes {
        bits,
        e2m1: fp4(ops.format),
        order: &order,
    };
    by_stored!(ops, g => each_row(
        (ops, acts, cols, out),
        (g.scales, g.biases),
        |w, x, s| row(w, x, s, (shift, kind))
    ))
}

/// How a row's codes read: bits per code, whether they are E2M1 values, the lane order.
#[derive(Clone, Copy)]
struct Codes<'a> {
    bits: u32,
    e2m1: bool,
    order: &'a [usize],
}

impl Codes<'_> {
    /// Code `i` of packed row `w` as the integer the kernels multiply (`2·v` for E2M1).
    fn int(&self, w: &[u8], i: usize) -> i32 {
        let q = code(w, i, self.bits);
        match self.e2m1 {
            true => i32::from(E2M1_TWICE[q as usize]),
            false => q as i32,
        }
    }
}

/// One weight row (packed) against one int8 row of x, without the bias part: a multiply-add
/// a span, on its blocks' totals summed.
fn row<P: Stored>(w: &[u8], x: Row, scales: &[P], (shift, kind): (u32, Codes)) -> f32 {
    let mut acc = [0f32; ACCUMULATORS];
    let two_groups = P::PER_STEP == 2;
    for s in 0..x.blocks / x.span {
        let blocks = s * x.span..(s + 1) * x.span;
        let t = blocks.map(|b| block_totals(w, &x, b, kind));
        let t = t.fold(Totals::default(), |a, t| a + t);
        let c = |half| block_scale(scales, shift, &x, s * x.span, half);
        let a = &mut acc[s % ACCUMULATORS];
        *a = fold(*a, t, (c(0), c(1)), two_groups);
    }
    reduce(acc)
}

/// Block `b`'s totals.
fn block_totals(w: &[u8], x: &Row, b: usize, kind: Codes) -> Totals {
    let at = |codes: &[i8]| lane_sums(w, &codes[b * BLOCK..], b, kind);
    let (hi, lo) = (at(x.hi), at(x.lo));
    Totals::of(std::array::from_fn(|l| digits(hi[l], lo[l])))
}

/// Block `b`'s lanes for one digit: each the exact sum of 4 code-times-digit products.
fn lane_sums(w: &[u8], x: &[i8], b: usize, kind: Codes) -> [i32; LANES] {
    std::array::from_fn(|l| {
        (l * PER_LANE..(l + 1) * PER_LANE)
            .map(|i| kind.int(w, b * BLOCK + kind.order[i]) * i32::from(x[i]))
            .sum()
    })
}

/// The integer path's product in f64, element by element: each block's dequantized x
/// (`u · (128 · hi + lo)`) times the weight (`s·q + b`), the bias part on the exact group sums
/// of x as the kernels take it. What tests measure the kernels' float steps against.
pub fn reference(ops: &Operands, acts: &Activations) -> Vec<f64> {
    let (bits, group, mode) = (ops.format.bits, ops.format.group, ops.format.mode);
    let order = layout::order(bits);
    let groups = ops.k / group;
    let mut out = vec![0f64; ops.m * ops.n];
    for n in 0..ops.n {
        let w = ops.w_row(n);
        for m in 0..ops.m {
            let x = acts.row(m);
            let weights = (0..ops.k).map(|i| {
                let (b, k) = (i / BLOCK, (i / BLOCK) * BLOCK + order[i % BLOCK]);
                let s = ops.scales.get(n * groups + k / group) as f64;
                let v = f64::from(digits(i32::from(x.hi[i]), i32::from(x.lo[i])));
                let q = mode.code_value(code(w, k, bits), bits) as f64;
                x.units[b] as f64 * v * s * q
            });
            let bias = |b: crate::Params| -> f64 {
                let sum =
                    |g: usize| b.get(n * groups + g) as f64 * acts.sums[m * groups + g] as f64;
                (0..groups).map(sum).sum()
            };
            out[m * ops.n + n] = weights.sum::<f64>() + ops.biases.map_or(0.0, bias);
        }
    }
    out
}
