//! The order in which the kernels take a weight row's codes.
//!
//! Every kernel walks a row in steps of [`STEP`] codes, held as [`VECTORS`] vectors of
//! [`LANES`] lanes, with one accumulator per vector. Which code a lane holds depends on the
//! format: whichever order comes out of the packed bytes with the fewest instructions (4-bit
//! codes split into low nibbles then high nibbles, 2-bit codes by their position in a byte). The
//! activations are put in the same order once per product ([`permute`]), so a lane multiplies
//! the code and the activation of the same column. Every ISA's kernel and the portable one
//! use this order, so a format's numerics do not depend on the machine.

/// Codes per step (the smallest group size, so a step never straddles two groups).
pub const STEP: usize = 32;
/// Lanes per vector (one AVX2 register of f32).
pub const LANES: usize = 8;
/// Vectors (and accumulators) per step.
pub const VECTORS: usize = STEP / LANES;

/// The code of a step (0..32) that lane `lane` of vector `v` holds.
pub fn lane_code(bits: u32, v: usize, lane: usize) -> usize {
    match bits {
        // Vectors 0 and 1 take the low nibbles of bytes 0..16 (even codes), 2 and 3 the high
        // ones (odd codes): one 16-lane widening of the step's bytes gives vectors 0|1.
        4 => 2 * (LANES * (v % 2) + lane) + v / 2,
        // Byte l holds codes 4l..4l+4; vector v takes the v-th of each byte.
        2 => 4 * lane + v,
        // The others come out in order.
        _ => LANES * v + lane,
    }
}

/// The step's codes in lane order: `order(bits)[i]` is the code in lane i % 8 of vector i / 8.
pub fn order(bits: u32) -> [usize; STEP] {
    std::array::from_fn(|i| lane_code(bits, i / LANES, i % LANES))
}

/// Whether the lanes take the codes in order (no permutation needed).
pub fn in_order(bits: u32) -> bool {
    !matches!(bits, 2 | 4)
}

/// The first `rows * k` values of x (k a multiple of [`STEP`]) with each step's values in
/// lane order, into `out`.
pub fn permute(x: &[f32], rows: usize, k: usize, bits: u32, out: &mut Vec<f32>) {
    // Every value is written below: only values the buffer grows by are zeroed first.
    out.resize(rows * k, 0.0);
    permute_into(&x[..rows * k], k, bits, out);
}

/// [`permute`] of all of `x` into `out` (as long).
pub fn permute_into(x: &[f32], k: usize, bits: u32, out: &mut [f32]) {
    debug_assert!(k.is_multiple_of(STEP) && out.len() == x.len());
    let order = order(bits);
    for (step, to) in x.chunks_exact(STEP).zip(out.chunks_exact_mut(STEP)) {
        for (t, &c) in to.iter_mut().zip(&order) {
            *t = step[c];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_is_a_permutation_of_the_step() {
        for bits in crate::BITS {
            let mut seen = order(bits).to_vec();
            seen.sort_unstable();
            assert_eq!(seen, (0..STEP).collect::<Vec<_>>(), "{bits} bits");
        }
    }
}
