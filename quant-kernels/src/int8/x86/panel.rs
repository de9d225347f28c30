//! The AVX-512 VNNI kernel for many rows of x (a prefill, a batch): 16 weight rows at a time
//! are unpacked once into a panel where lane `j` of every register is weight row `j`
//! (`[block][int8 lane][16 rows][4 codes]`), and [`ROWS`] rows of x at a time are multiplied
//! with it, their digits broadcast from memory into the `vpdpbusd`s. A panel register is
//! loaded once for the rows, and each row's digit has its own accumulator, so eight chains of
//! `vpdpbusd` run side by side. The lanes of a span (a block, or two where x's units span
//! two: [`crate::int8::span_of`]) add up in those accumulators, so a span's totals come out
//! one register a row, 16 weight rows side by side, and the float steps are the module's, one
//! output a lane: per span `c = s_w · u` and `acc[s % 4] = fma(c, total, acc[s % 4])`, the
//! same sums at the end, the bias part added last. So each output has the bits the row
//! kernels (and the portable kernel) give it.
//!
//! E2M1 codes (`mxfp4`, `nvfp4`) enter as `2·v + 12`, and `12 · lane_sum` is taken back from
//! each total as the row kernels do; an `nvfp4` block's lanes 0, 1, 4, 5 (its first group)
//! are summed apart from 2, 3, 6, 7.

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::super::{fp4, group_shift, Mode, Row, Totals, BLOCK, DIGIT_SHIFT, E2M1_OFFSET, LANES};
use super::{block_bytes, block_codes, Walk, E2M1};
use crate::{Format, Operands, Stored};

/// Weight rows a panel holds: the lanes of a 512-bit register of i32.
const WIDTH: usize = 16;

/// The fewest rows of x that take the panel kernel, and the fewest for a short row (at most
/// [`SHORT`] values). One thread of a family-25 EPYC, 4-bit, against the row kernels
/// (`examples/int8_speed`): at 8 rows k = 576 took 174 against 283 us and k = 1536 was even,
/// but k = 2048 took 4.0 against 3.2 ms (a longer panel and its rows of x leave L1); at 16
/// rows it took 5.4 against 6.5 ms; at 4 rows k = 576 took 129 against 139 us.
pub(in crate::int8) const PANEL_FROM: usize = 9;
pub(in crate::int8) const SHORT_PANEL_FROM: usize = 4;
pub(in crate::int8) const SHORT: usize = 1024;

/// Rows of x multiplied with a panel at once (the last group padded with copies of its last
/// row, never written): their accumulators fill the registers.
const ROWS: usize = 4;

/// The int8 lanes of a block's two groups (`nvfp4`).
const HALVES: [[usize; 4]; 2] = [[0, 1, 4, 5], [2, 3, 6, 7]];
/// A span's lanes, of its one block or of its two (the first [`LANES`] of them).
const WHOLE: [usize; 2 * LANES] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

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
    /// E2M1: `[m][block]` what the codes' offset adds to each total, `12 · lane_sum`.
    offsets: Vec<Totals>,
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
/// against every row of x, [`ROWS`] at a time.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn panels<const KIND: u32, P: Stored>(
    (ops, acts, cols, out): Walk,
    params: (&[P], &[P]),
    panel: &mut Panel,
) {
    let shift = group_shift(ops.format);
    panel.offsets.clear();
    if KIND == E2M1 {
        let sums = acts.lane_sums[..ops.m * ops.k / BLOCK * LANES].chunks_exact(LANES);
        panel.offsets.extend(sums.map(|s| {
            let t = Totals::of(std::array::from_fn(|l| s[l]));
            Totals {
                first: E2M1_OFFSET * t.first,
                second: E2M1_OFFSET * t.second,
            }
        }));
    }
    let groups: Vec<[usize; ROWS]> = (0..ops.m)
        .step_by(ROWS)
        .map(|m0| std::array::from_fn(|i| (m0 + i).min(ops.m - 1)))
        .collect();
    let groups_k = ops.k / ops.format.group;
    for n0 in cols.clone().step_by(WIDTH) {
        let rows: [usize; WIDTH] = std::array::from_fn(|j| (n0 + j).min(cols.end - 1));
        unpack::<KIND, P>(ops, rows, params, panel);
        let count = (cols.end - n0).min(WIDTH);
        for (g, ms) in groups.iter().enumerate() {
            let xs = ms.map(|m| acts.row(m));
            let v = group::<KIND, P>(panel, &xs, (*ms, shift));
            for (i, (&m, v)) in ms.iter().zip(v).enumerate().take(ops.m - g * ROWS) {
                let v = match panel.biases.is_empty() {
                    true => v,
                    false => {
                        let sums = &acts.sums[m * groups_k..(m + 1) * groups_k];
                        _mm512_add_ps(v, super::tiles::bias_part(panel.biases.as_ptr(), sums))
                    }
                };
                let mut lanes = [0f32; WIDTH];
                _mm512_storeu_ps(lanes.as_mut_ptr(), v);
                for (j, v) in lanes.into_iter().take(count).enumerate() {
                    // SAFETY: the caller was given an output of m * n values.
                    out.write(g * ROWS + i, n0 + j, ops.n, v);
                }
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

/// [`ROWS`] rows of x (`xs`, rows `ms`) against the panel: each one's 16 outputs without
/// the bias part, by the span of their units.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn group<const KIND: u32, P: Stored>(
    panel: &Panel,
    xs: &[Row; ROWS],
    at: ([usize; ROWS], u32),
) -> [__m512; ROWS] {
    match xs[0].span {
        1 => spans::<KIND, P, 1>(panel, xs, at),
        _ => spans::<KIND, P, 2>(panel, xs, at),
    }
}

/// [`group`] on spans of `SPAN` blocks, in fours so that each accumulator is a register.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn spans<const KIND: u32, P: Stored, const SPAN: usize>(
    panel: &Panel,
    xs: &[Row; ROWS],
    at: ([usize; ROWS], u32),
) -> [__m512; ROWS] {
    let spans = xs[0].blocks / SPAN;
    let mut acc = [[_mm512_setzero_ps(); 4]; ROWS];
    let whole = spans / 4 * 4;
    for s in (0..whole).step_by(4) {
        for j in 0..4 {
            span::<KIND, P, SPAN>(panel, xs, (at, s + j), &mut acc, j);
        }
    }
    for j in 0..spans - whole {
        match j {
            0 => span::<KIND, P, SPAN>(panel, xs, (at, whole), &mut acc, 0),
            1 => span::<KIND, P, SPAN>(panel, xs, (at, whole + 1), &mut acc, 1),
            _ => span::<KIND, P, SPAN>(panel, xs, (at, whole + 2), &mut acc, 2),
        }
    }
    let mut out = [_mm512_setzero_ps(); ROWS];
    for r in 0..ROWS {
        let a = acc[r];
        out[r] = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    }
    out
}

/// Span `s` of each row into its accumulator `j` (`s % 4`): one multiply-add on its total
/// (its blocks' lanes summed in the same `vpdpbusd` chains), or (`nvfp4`, a block a span)
/// its first group's then its second's.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn span<const KIND: u32, P: Stored, const SPAN: usize>(
    panel: &Panel,
    xs: &[Row; ROWS],
    ((ms, shift), s): (([usize; ROWS], u32), usize),
    acc: &mut [[__m512; 4]; ROWS],
    j: usize,
) {
    let b = s * SPAN;
    let codes = panel.codes.as_ptr().add(b * LANES * WIDTH);
    let digits: [(*const i8, *const i8); ROWS] = [
        (
            xs[0].hi.as_ptr().add(b * BLOCK),
            xs[0].lo.as_ptr().add(b * BLOCK),
        ),
        (
            xs[1].hi.as_ptr().add(b * BLOCK),
            xs[1].lo.as_ptr().add(b * BLOCK),
        ),
        (
            xs[2].hi.as_ptr().add(b * BLOCK),
            xs[2].lo.as_ptr().add(b * BLOCK),
        ),
        (
            xs[3].hi.as_ptr().add(b * BLOCK),
            xs[3].lo.as_ptr().add(b * BLOCK),
        ),
    ];
    let at = (ms, b, xs[0].blocks);
    match P::PER_STEP {
        2 => {
            debug_assert_eq!(SPAN, 1, "a span lies in one weight group");
            let t = totals(codes, digits, &HALVES[0]);
            fold::<KIND>(panel, xs, (t, at, Some(0)), 2 * b, (acc, j));
            let t = totals(codes, digits, &HALVES[1]);
            fold::<KIND>(panel, xs, (t, at, Some(1)), 2 * b + 1, (acc, j));
        }
        _ => {
            // A span's blocks are adjacent in the panel and in x: its lanes run on.
            let t = totals(codes, digits, &WHOLE[..SPAN * LANES]);
            fold::<KIND>(panel, xs, (t, at, None), b >> shift, (acc, j));
        }
    }
}

/// Where a span is: the rows of x (`ms`), its first block, and the blocks of a row.
type Place = ([usize; ROWS], usize, usize);

/// Each row's total `t` of the span at `b` (rows `ms` of `blocks` blocks; `half` the `nvfp4`
/// group it is, `None` both) with weight group `group`'s scales and the span's unit (its
/// first block's) into accumulator `j`. E2M1 offsets are a block's: E2M1 spans are a block.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
unsafe fn fold<const KIND: u32>(
    panel: &Panel,
    xs: &[Row; ROWS],
    (t, (ms, b, blocks), half): ([__m512i; ROWS], Place, Option<usize>),
    group: usize,
    (acc, j): (&mut [[__m512; 4]; ROWS], usize),
) {
    let s_w = _mm512_loadu_ps(panel.scales.as_ptr().add(group * WIDTH));
    for r in 0..ROWS {
        let offset = match KIND {
            E2M1 => Some(panel.offsets[ms[r] * blocks + b]),
            _ => None,
        };
        let x = (t[r], xs[r].units[b]);
        acc[r][j] = super::tiles::fold_total(acc[r][j], s_w, x, (offset, half));
    }
}

/// The span's int8 lanes `lanes` of the panel against each row's digits, summed: one
/// `vpdpbusd` chain per row and digit, the high digits' total shifted before the low ones'
/// is added.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
unsafe fn totals(
    codes: *const i32,
    digits: [(*const i8, *const i8); ROWS],
    lanes: &[usize],
) -> [__m512i; ROWS] {
    let mut hi = [_mm512_setzero_si512(); ROWS];
    let mut lo = [_mm512_setzero_si512(); ROWS];
    for &l in lanes {
        let q = _mm512_loadu_si512(codes.add(l * WIDTH) as *const __m512i);
        for r in 0..ROWS {
            let h = (digits[r].0.add(4 * l) as *const i32).read_unaligned();
            let w = (digits[r].1.add(4 * l) as *const i32).read_unaligned();
            hi[r] = _mm512_dpbusd_epi32(hi[r], q, _mm512_set1_epi32(h));
            lo[r] = _mm512_dpbusd_epi32(lo[r], q, _mm512_set1_epi32(w));
        }
    }
    for r in 0..ROWS {
        hi[r] = _mm512_add_epi32(_mm512_slli_epi32::<{ DIGIT_SHIFT }>(hi[r]), lo[r]);
    }
    hi
}

/// `((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7))`: the pairwise sum every set ends with.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn tree(v: [__m512; 8]) -> __m512 {
    let even = _mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6]));
    let odd = _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7]));
    _mm512_add_ps(even, odd)
}
