//! The AVX-512 VNNI kernel for many rows of x (a prefill): 16 weight rows at a time are
//! unpacked once into a panel where lane `j` of every register is weight row `j`
//! (`[block][int8 lane][16 rows][4 codes]`), and each row of x is multiplied with the panel,
//! its digits broadcast from memory into the `vpdpbusd`s. So codes are unpacked once for all
//! rows of x, no register is permuted, and the 16 outputs of a row of x come out side by side.
//! The float steps are the row kernels' in their order, one output a lane: per block
//! `c = s_w · u`, then `acc[b % 4][l] = fma(c, lane_l, acc[b % 4][l])` (the four accumulators
//! one after another, blocks `j, j + 4, ..`), the same sums at the end, the bias part added
//! last. So each output has the bits the row kernels (and the portable kernel) give it.
//!
//! E2M1 codes (`mxfp4`, `nvfp4`) enter as `2·v + 12`, and `12 · lane_sum` is taken back from
//! each lane as the row kernels do; `nvfp4`'s lanes 0, 1, 4, 5 take a block's first group's
//! scale and 2, 3, 6, 7 its second's.

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::super::{fp4, group_shift, Mode, Row, BLOCK, DIGIT_SHIFT, E2M1_OFFSET, LANES};
use super::{block_bytes, block_codes, Walk, E2M1};
use crate::{Format, Operands, Stored};

/// Weight rows a panel holds: the lanes of a 512-bit register of i32.
const WIDTH: usize = 16;

/// The fewest rows of x that take the panel kernel: from 9 rows its products were faster than
/// the row kernels' on every shape of `examples/int8_speed` (at 8 they were even).
pub(in crate::int8) const PANEL_FROM: usize = 9;

/// Whether the panel kernel takes `format`.
pub(in crate::int8) fn takes(format: Format) -> bool {
    format.mode == Mode::Affine || fp4(format)
}

/// A panel of 16 weight rows, unpacked (one per thread, kept between calls).
#[derive(Default)]
struct Panel {
    /// `[block][LANES][WIDTH]`: weight row `j`'s 4 codes of an int8 lane, as an i32's bytes.
    codes: Vec<i32>,
    /// `[group][WIDTH]` the rows' scales, widened (and halved for E2M1 codes, which enter as
    /// twice their value).
    scales: Vec<f32>,
    /// `[group][WIDTH]` the rows' biases, widened (empty in a float mode).
    biases: Vec<f32>,
    /// E2M1: `[m][block][LANES]` what the codes' offset adds to each lane, `12 · lane_sum`.
    offsets: Vec<i32>,
}

thread_local! {
    static PANEL: RefCell<Panel> = RefCell::new(Panel::default());
}

/// Columns `walk.2` of the product, 16 weight rows a panel.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; `takes(format)`; as `int8::columns`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn columns<const KIND: u32>(walk: Walk) {
    let ops = walk.0;
    crate::vector::by_stored!(ops, g => PANEL.with_borrow_mut(|panel| {
        // SAFETY: this function's features are the kernel's.
        unsafe { panels::<KIND, _>(walk, (g.scales, g.biases), panel) }
    }))
}

/// Each 16 weight rows of the columns (the last ones padded with copies, never written)
/// against every row of x.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn panels<const KIND: u32, P: Stored>(
    (ops, acts, cols, out): Walk,
    params: (&[P], &[P]),
    panel: &mut Panel,
) {
    let shift = group_shift(ops.format);
    panel.offsets.clear();
    if KIND == E2M1 {
        let sums = &acts.lane_sums[..ops.m * ops.k / BLOCK * LANES];
        panel.offsets.extend(sums.iter().map(|s| E2M1_OFFSET * s));
    }
    for n0 in cols.clone().step_by(WIDTH) {
        let rows: [usize; WIDTH] = std::array::from_fn(|j| (n0 + j).min(cols.end - 1));
        unpack::<KIND, P>(ops, rows, params, panel);
        let count = (cols.end - n0).min(WIDTH);
        for m in 0..ops.m {
            let mut v = [0f32; WIDTH];
            let x = acts.row(m);
            _mm512_storeu_ps(
                v.as_mut_ptr(),
                row::<KIND, P>(panel, x, &acts.sums, shift, m),
            );
            for (j, v) in v.into_iter().take(count).enumerate() {
                // SAFETY: the caller was given an output of m * n values.
                out.write(m, n0 + j, ops.n, v);
            }
        }
    }
}

/// Weight rows `rows` into the panel: codes by int8 lane, scales and biases widened.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn unpack<const KIND: u32, P: Stored>(
    ops: &Operands,
    rows: [usize; WIDTH],
    (scales, biases): (&[P], &[P]),
    panel: &mut Panel,
) {
    let (blocks, groups) = (ops.k / BLOCK, ops.k / ops.format.group);
    let step = block_bytes(KIND);
    panel.codes.resize(blocks * LANES * WIDTH, 0);
    for (j, &n) in rows.iter().enumerate() {
        let w = ops.w_row(n).as_ptr();
        for b in 0..blocks {
            let mut q = [0i32; LANES];
            _mm256_storeu_si256(
                q.as_mut_ptr() as *mut __m256i,
                block_codes::<KIND>(w.add(b * step)),
            );
            for (l, q) in q.into_iter().enumerate() {
                panel.codes[(b * LANES + l) * WIDTH + j] = q;
            }
        }
    }
    let spread = |params: &[P], factor: f32, dst: &mut Vec<f32>| {
        dst.clear();
        let at = |i: usize| params[rows[i % WIDTH] * groups + i / WIDTH].widen();
        if !params.is_empty() {
            dst.extend((0..groups * WIDTH).map(|i| at(i) * factor));
        }
    };
    spread(scales, if P::FLOAT { 0.5 } else { 1.0 }, &mut panel.scales);
    spread(biases, 1.0, &mut panel.biases);
}

/// Row `m` of x against the panel: its 16 outputs.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn row<const KIND: u32, P: Stored>(
    panel: &Panel,
    x: Row,
    sums: &[f32],
    shift: u32,
    m: usize,
) -> __m512 {
    let blocks = x.scales.len();
    let chains = [0, 1, 2, 3].map(|j| {
        // SAFETY: this function's features are the kernel's.
        unsafe { chain::<KIND, P>(panel, &x, At { m, blocks, shift }, j) }
    });
    let v = reduce(chains);
    match panel.biases.is_empty() {
        true => v,
        false => {
            let groups = panel.biases.len() / WIDTH;
            _mm512_add_ps(
                v,
                bias_part(&panel.biases, &sums[m * groups..(m + 1) * groups]),
            )
        }
    }
}

/// Where a chain is: row `m` of x, its blocks, the weight group shift.
#[derive(Clone, Copy)]
struct At {
    m: usize,
    blocks: usize,
    shift: u32,
}

/// Accumulator `j`: blocks `j, j + 4, ..` in order, in registers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn chain<const KIND: u32, P: Stored>(
    panel: &Panel,
    x: &Row,
    at: At,
    j: usize,
) -> [__m512; LANES] {
    let mut acc = [_mm512_setzero_ps(); LANES];
    let mut b = j;
    while b < at.blocks {
        acc = block::<KIND, P>(panel, x, (at, b), acc);
        b += 4;
    }
    acc
}

/// Block `b` into the accumulators of its chain.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn block<const KIND: u32, P: Stored>(
    panel: &Panel,
    x: &Row,
    (at, b): (At, usize),
    mut acc: [__m512; LANES],
) -> [__m512; LANES] {
    let unit = _mm512_set1_ps(x.scales[b]);
    let scale =
        |g: usize| _mm512_mul_ps(_mm512_loadu_ps(panel.scales.as_ptr().add(g * WIDTH)), unit);
    let (first, second) = match P::PER_STEP {
        2 => (scale(2 * b), scale(2 * b + 1)),
        _ => (scale(b >> at.shift), scale(b >> at.shift)),
    };
    let codes = panel.codes.as_ptr().add(b * LANES * WIDTH);
    let (hi, lo) = (x.hi.as_ptr().add(b * BLOCK), x.lo.as_ptr().add(b * BLOCK));
    for (l, acc) in acc.iter_mut().enumerate() {
        let q = _mm512_loadu_si512(codes.add(l * WIDTH) as *const __m512i);
        let xh = _mm512_set1_epi32((hi.add(4 * l) as *const i32).read_unaligned());
        let xl = _mm512_set1_epi32((lo.add(4 * l) as *const i32).read_unaligned());
        let h = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xh);
        let mut p = _mm512_dpbusd_epi32(_mm512_slli_epi32::<{ DIGIT_SHIFT }>(h), q, xl);
        if KIND == E2M1 {
            let offset = panel.offsets[(at.m * at.blocks + b) * LANES + l];
            p = _mm512_sub_epi32(p, _mm512_set1_epi32(offset));
        }
        let c = if (l >> 1) & 1 == 0 { first } else { second };
        *acc = _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(p), *acc);
    }
    acc
}

/// The accumulators summed as `int8::reduce` does, one output a lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn reduce(acc: [[__m512; LANES]; 4]) -> __m512 {
    let mut a = [_mm512_setzero_ps(); LANES];
    for (l, a) in a.iter_mut().enumerate() {
        let front = _mm512_add_ps(acc[0][l], acc[1][l]);
        *a = _mm512_add_ps(front, _mm512_add_ps(acc[2][l], acc[3][l]));
    }
    tree(a)
}

/// `((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7))`: the pairwise sum every set ends with.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn tree(v: [__m512; 8]) -> __m512 {
    let even = _mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6]));
    let odd = _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7]));
    _mm512_add_ps(even, odd)
}

/// `bias_term` one output a lane: 8 chains over the groups, `fma(b_g, Σx_g, t[g % 8])`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn bias_part(biases: &[f32], sums: &[f32]) -> __m512 {
    let mut t = [_mm512_setzero_ps(); 8];
    let step = |g: usize, t: __m512| {
        let b = _mm512_loadu_ps(biases.as_ptr().add(g * WIDTH));
        _mm512_fmadd_ps(b, _mm512_set1_ps(sums[g]), t)
    };
    let whole = sums.len() / 8 * 8;
    for g0 in (0..whole).step_by(8) {
        for (j, t) in t.iter_mut().enumerate() {
            *t = step(g0 + j, *t);
        }
    }
    for (j, g) in (whole..sums.len()).enumerate() {
        t[j] = step(g, t[j]);
    }
    tree(t)
}
